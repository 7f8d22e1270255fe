// runner/request_rules.h — the per-request rules a request's rows get before the sampling op:
// its LogitsRules (logit_bias, allowed_token_ids, bad_words) and the min_tokens suppression of
// its stop and EOS ids. Row i of a step is ruled as if drafts[0..i) had been accepted, which is
// the only case in which its draw counts. Runs on the thread calling ModelRunner::execute.
#pragma once

#include <cstdint>
#include <span>

#include "runner/worker_requests.h"

namespace kestrel {

// rows: drafts.size() + 1 rows of `vocab` logits, modified in place.
void apply_request_rules(const WorkerRequest& req, std::span<const int32_t> drafts,
                         std::span<float> rows, size_t vocab);

}  // namespace kestrel
