// sched/request_sampling.h — how a request's tokens are chosen, as plain data: it travels with the
// request to whichever thread or process samples it (NewRequestData). SamplingParams, the
// sampling op's knobs, are sampling/sampling_params.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampling_params.h"

namespace kestrel {

struct TokenBias {
  int32_t token = 0;
  float bias = 0.0f;  // added to the logit; the server clamps it to [-100, 100]
  bool operator==(const TokenBias&) const = default;
};

// OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words.
struct LogitsRules {
  std::vector<TokenBias> logit_bias;
  // Non-empty: every other token is masked (-inf).
  std::vector<int32_t> allowed_token_ids;
  // Token sequences that must not be generated: a sequence's last token is masked when the
  // output ends with the rest of it (a one-token sequence is always masked), as vLLM does.
  std::vector<std::vector<int32_t>> bad_words;

  bool empty() const {
    return logit_bias.empty() && allowed_token_ids.empty() && bad_words.empty();
  }
  bool operator==(const LogitsRules&) const = default;
};

// Everything the sampler of one request needs, besides its tokens.
struct RequestSampling {
  SamplingParams params;
  uint64_t seed = 0;  // of the request's own generator
  // Tokens masked out while fewer than min_tokens outputs exist (its stop and EOS ids).
  int64_t min_tokens = 0;
  std::vector<int32_t> min_tokens_suppressed;
  int prompt_logprobs = -1;  // -1 = none; N >= 0 = score each prompt token with the top N
  LogitsRules rules;
  bool operator==(const RequestSampling&) const = default;
};

}  // namespace kestrel
