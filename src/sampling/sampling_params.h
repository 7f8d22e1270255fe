// sampling/sampling_params.h — the vocabulary of sampling that the engine, its contract with the
// workers and the backend's sampling op share: a request's knobs, its counter-based random
// stream, and the logprobs a sample reports. Plain data, below sched/ and backend/ alike.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel {

// The knobs of the sampling op, per request.
struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 or -1 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF/vLLM: divides positive logits, multiplies negative ones
  float presence_penalty = 0.0f;    // OpenAI: subtract once if the token appeared in the output
  float frequency_penalty = 0.0f;   // OpenAI: subtract count × penalty (output tokens)
  int logprobs = -1;                // -1 = none; N >= 0 = chosen token's logprob plus top-N
  bool operator==(const SamplingParams&) const = default;
};

// A request's random stream, counter based: draw n is a hash of (seed, n), so the two numbers
// are its whole state and any worker reproduces the stream from them.
struct SamplerRng {
  uint64_t seed = 0;
  uint64_t draws = 0;  // draws taken so far

  // The next 53-bit uniform in [0, 1).
  double next_uniform() {
    // SplitMix64 (Steele, Lea and Flood, 2014) with its state computed from the counter, which
    // is what makes it counter based; it passes BigCrush.
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * ++draws;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  bool operator==(const SamplerRng&) const = default;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

// A token with its logprob, its rank (1 = most likely; 0 when not computed) and the top
// alternatives, best first: sampled tokens, and prompt tokens scored for prompt logprobs.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top;
  bool operator==(const TokenLogprobs&) const = default;
};

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

}  // namespace kestrel
