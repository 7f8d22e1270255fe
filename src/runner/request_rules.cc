#include "runner/request_rules.h"

#include <limits>
#include <vector>

#include "runner/logits_rules.h"

namespace kestrel {

void apply_request_rules(const WorkerRequest& req, std::span<const int32_t> drafts,
                         std::span<float> rows, size_t vocab) {
  const RequestSampling& s = req.sampling;
  const int64_t num_outputs = static_cast<int64_t>(req.outputs().size());
  if (s.rules.empty() && num_outputs >= s.min_tokens) return;
  std::vector<int32_t> context(req.outputs().begin(), req.outputs().end());
  for (size_t i = 0; i <= drafts.size(); ++i) {
    if (i > 0) context.push_back(drafts[i - 1]);
    const std::span<float> row = rows.subspan(i * vocab, vocab);
    if (!s.rules.empty()) apply_logits_rules(s.rules, context, row);
    if (static_cast<int64_t>(context.size()) < s.min_tokens) {
      for (const int32_t t : s.min_tokens_suppressed)
        if (t >= 0 && size_t(t) < vocab) row[size_t(t)] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace kestrel
