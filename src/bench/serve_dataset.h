// bench/serve_dataset.h — the request sets `bench serve` sends, as vLLM's benchmark datasets build
// them: synthetic random-token prompts of exact token length, and ShareGPT conversations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/token_codec.h"

namespace kestrel::bench {

struct SampleRequest {
  std::string prompt;               // valid UTF-8
  std::vector<int32_t> prompt_ids;  // the tokenization of `prompt`
  int64_t prompt_len = 0;           // prompt_ids.size()
  int64_t expected_output_len = 0;
};

struct RandomDatasetSpec {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  int64_t prefix_len = 0;  // random tokens shared by every prompt, on top of the sampled length
  double range_ratio = 0.0;
  uint64_t seed = 0;
};

// vLLM's RandomDataset. The sampled part of each prompt has a length uniform in
// [floor(L(1-r)), ceil(L(1+r))] with L = input_len minus the special tokens the tokenizer adds
// (so the server's count, BOS included, is about input_len); prompt_len = prefix_len + that.
// Output lengths are uniform in [floor(O(1-r)), ceil(O(1+r))], at least 1. Prompts are built
// from the codec's ordinary ids and are text: for every request,
// tokenizer.encode(prompt, false) == prompt_ids, prompt_ids.size() == prompt_len, and the first
// prefix_len ids are the same in every request.
Expected<std::vector<SampleRequest>> random_dataset(TokenCodec& tokenizer,
                                                    const RandomDatasetSpec& spec);

// vLLM's ShareGPTDataset: a JSON list of {"conversations": [{"from", "value"}, ...]}; entries
// with fewer than two turns are dropped, the rest shuffled with `seed`. The first turn is the
// prompt, the second's token count the expected output (or output_len_override). Kept in
// shuffled order until num_prompts are found, skipping pairs with prompt < 4 tokens, output < 4
// tokens (unless overridden), prompt > 1024 tokens or prompt + output > 2048 tokens. Token counts
// include the special tokens the tokenizer adds, as vLLM's do; prompt_ids are those ids. When
// fewer than num_prompts pass, randomly chosen ones are repeated to fill up (vLLM's
// oversampling). Errors when the file cannot be read or parsed, when no entry passes, or when
// the tokenizer fails.
Expected<std::vector<SampleRequest>> sharegpt_dataset(TokenCodec& tokenizer,
                                                      const std::string& path, int64_t num_prompts,
                                                      uint64_t seed,
                                                      std::optional<int64_t> output_len_override);

}  // namespace kestrel::bench
