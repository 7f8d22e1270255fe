// engine/spec_decode_stats.h — speculative decoding's counters, as vLLM counts them
// (specdec-quant.md §1.9): per step, a request with d > 0 scheduled drafts of which a were
// accepted adds one draft, d draft tokens, a accepted tokens and one at positions 0..a-1. The
// engine core owns the live counters; snapshots are plain copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct SpecDecodeStats {
  int64_t num_drafts = 0;
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // one entry per draft position, 0..k-1

  void observe(int64_t num_draft_tokens, int64_t num_accepted);
  bool empty() const { return num_drafts == 0; }
};

// vLLM's periodic line over the interval from `before` to `now` (`seconds` long): "SpecDecoding
// metrics: Mean acceptance length: …, Accepted throughput: … tokens/s, Drafted throughput: …
// tokens/s, Accepted: N tokens, Drafted: N tokens, Per-position acceptance rate: …, Avg Draft
// acceptance rate: …%". Mean acceptance length = 1 + accepted / drafts.
std::string spec_decode_log_line(const SpecDecodeStats& before, const SpecDecodeStats& now,
                                 double seconds);

}  // namespace kestrel
