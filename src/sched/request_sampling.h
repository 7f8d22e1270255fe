// sched/request_sampling.h — how a request's tokens are chosen, as plain data: it travels with the
// request to whichever thread or process samples it (NewRequestData). Its parts (the sampling
// op's knobs, the logits rules) are sampling/sampling_params.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampling_params.h"

namespace kestrel {

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
