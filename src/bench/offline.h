// bench/offline.h — vLLM's offline benchmarks on an in-process engine: `bench latency` (time to
// finish one batch, repeated) and `bench throughput` (many requests at once, tokens per second),
// fed with random token-id prompts so input lengths are exact.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/engine_client.h"

namespace kestrel::bench {

struct RandomPromptSpec {
  int64_t num_prompts = 1;
  int64_t input_len = 32;  // tokens after the shared prefix
  int64_t output_len = 128;
  int64_t prefix_len = 0;    // random tokens shared by every prompt (prefix-cache studies)
  double range_ratio = 0.0;  // lengths uniform in [L(1-r), L(1+r)], as vLLM's random dataset
  uint64_t seed = 0;
  int32_t vocab_size = 0;
  std::vector<int32_t> excluded_ids;  // never drawn (a tokenizer's special tokens)
};

struct BenchPrompt {
  std::vector<int32_t> token_ids;
  int64_t output_len = 0;
};

Expected<std::vector<BenchPrompt>> random_prompts(const RandomPromptSpec& spec);

struct BenchSampling {
  float temperature = 1.0f;  // vLLM's benchmarks sample at temperature 1, top_p 1
  float top_p = 1.0f;
  bool detokenize = true;
  uint64_t seed = 0;
};

struct BatchResult {
  double elapsed_s = 0.0;
  int64_t num_requests = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache
};

// Submits every prompt at once (ids `tag`-0, `tag`-1, …; ignore_eos so outputs have their full
// length) and waits for all of them. Errors if any request fails.
Expected<BatchResult> run_batch(EngineClient& client, const std::vector<BenchPrompt>& prompts,
                                const BenchSampling& sampling, const std::string& tag);

// Percentile by linear interpolation between closest ranks (numpy's default).
double percentile(std::vector<double> values, double pct);

}  // namespace kestrel::bench
