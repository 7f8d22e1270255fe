// runner/logits_rules.h — applies a request's LogitsRules (sampling/sampling_params.h: OpenAI's
// logit_bias, vLLM's allowed_token_ids and bad_words) to a row of logits before the token mask,
// sampling and logprobs. A pure function; the runner calls it once per sampled row.
#pragma once

#include <cstdint>
#include <span>

#include "sched/request_sampling.h"

namespace kestrel {

// Applies `rules` to `logits` (one vocabulary row) given the tokens generated so far. Ids
// outside the row are ignored (the server rejects them before a request is admitted).
void apply_logits_rules(const LogitsRules& rules, std::span<const int32_t> output_tokens,
                        std::span<float> logits);

}  // namespace kestrel
