// runner/row_sampler.h — turns one request's logits rows of a step into its tokens: the row of
// its last known token, then one row per draft token. Each row gets the request's rules, the
// min_tokens suppression, its token mask (first row only) and a draw from the request's own
// generator; a draft is accepted while it equals the token drawn for its position. With one
// draw per emitted token in order, the tokens are those decoding without drafts would give for
// the same seed (exact-match verification of a point-mass proposal is lossless).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/worker_requests.h"
#include "sched/runner_output.h"

namespace kestrel {

struct RowSamples {
  std::vector<int32_t> tokens;          // accepted drafts, then the token drawn after them
  std::vector<TokenLogprobs> logprobs;  // one per token when the request asked for them
  bool no_token_allowed = false;        // the first row had no allowed token
};

// rows: drafts.size() + 1 rows of `vocab` logits, modified in place. mask: null or the
// request's allowed-token bits for the first row.
RowSamples sample_rows(WorkerRequest& req, std::span<float> rows, size_t vocab,
                       std::span<const int32_t> drafts, const std::vector<uint64_t>* mask);

cpu::SamplingParams to_cpu(const SamplingParams& p);

}  // namespace kestrel
