// backend/cpu/sampling.h — turning one row of logits into a token, with per-request parameters.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kestrel::cpu {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 or -1 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF/vLLM: divides positive logits, multiplies negative ones
  float presence_penalty = 0.0f;    // OpenAI: subtract once if the token appeared in the output
  float frequency_penalty = 0.0f;   // OpenAI: subtract count × penalty (output tokens)
  int logprobs = -1;                // -1 = none; N >= 0 = chosen token's logprob plus top-N
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// Logprobs are taken from the row as sample() receives it: after the runner's per-request
// rules and masks (logit_bias, allowed_token_ids, bad_words, min_tokens, structured output), but
// before penalties and temperature. vLLM reports logprobs of the raw logits, before all of these.
struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // of the chosen token
  std::vector<TokenLogprob> top;  // top-N by logprob, best first
};

// A seeded per-request generator (std::mt19937_64 so results are reproducible across builds).
using Rng = std::mt19937_64;

// How the model scored a given token (a prompt token, for prompt logprobs): its logprob under the
// raw logits, its rank (1 = the most likely token) and the top-n alternatives, best first.
struct ScoredToken {
  int32_t token = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top;
};
ScoredToken score_token(std::span<const float> logits, int32_t token, int top_n);

// logits: one row of vocab size, modified in place (penalties, temperature, masks).
// prompt_tokens feed the repetition penalty (as vLLM: prompt and output); output_tokens feed all
// three penalties.
SampleResult sample(std::span<float> logits, const SamplingParams& p,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                    Rng& rng);

}  // namespace kestrel::cpu
