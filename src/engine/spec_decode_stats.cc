#include "engine/spec_decode_stats.h"

#include <fmt/format.h>

namespace kestrel {

void SpecDecodeStats::observe(int64_t draft_tokens, int64_t accepted) {
  if (draft_tokens <= 0) return;
  ++num_drafts;
  num_draft_tokens += draft_tokens;
  num_accepted_tokens += accepted;
  if (accepted_per_pos.size() < size_t(draft_tokens)) accepted_per_pos.resize(size_t(draft_tokens));
  for (int64_t i = 0; i < accepted; ++i) ++accepted_per_pos[size_t(i)];
}

std::string spec_decode_log_line(const SpecDecodeStats& before, const SpecDecodeStats& now,
                                 double seconds) {
  const int64_t drafts = now.num_drafts - before.num_drafts;
  const int64_t drafted = now.num_draft_tokens - before.num_draft_tokens;
  const int64_t accepted = now.num_accepted_tokens - before.num_accepted_tokens;
  const double per_s = seconds > 0 ? 1.0 / seconds : 0.0;
  std::string rates;
  for (size_t i = 0; i < now.accepted_per_pos.size(); ++i) {
    const int64_t earlier = i < before.accepted_per_pos.size() ? before.accepted_per_pos[i] : 0;
    const double r = drafts > 0 ? double(now.accepted_per_pos[i] - earlier) / double(drafts) : 0.0;
    rates += fmt::format("{}{:.3f}", rates.empty() ? "" : ", ", r);
  }
  return fmt::format(
      "SpecDecoding metrics: Mean acceptance length: {:.2f}, Accepted throughput: {:.2f} "
      "tokens/s, Drafted throughput: {:.2f} tokens/s, Accepted: {} tokens, Drafted: {} tokens, "
      "Per-position acceptance rate: {}, Avg Draft acceptance rate: {:.1f}%",
      drafts > 0 ? 1.0 + double(accepted) / double(drafts) : 0.0, double(accepted) * per_s,
      double(drafted) * per_s, accepted, drafted, rates,
      drafted > 0 ? 100.0 * double(accepted) / double(drafted) : 0.0);
}

}  // namespace kestrel
