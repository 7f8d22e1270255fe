// tests/model/prompt_logits.h — what the quantized-checkpoint tests share: a fixture directory's
// path, and the logits of every position of one prompt through a freshly loaded model.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "model/batch_builder.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {

inline std::string fixture(const std::string& name) {
  return test::fixtures_dir() + "/models/" + name;
}

// A model's KV cache for one sequence of up to `blocks` blocks of 16 in every KV cache group
// (group g's blocks are g·blocks + i), with one linear-attention state slot (slot 0) for hybrid
// models.
struct OneSequenceCache {
  static constexpr int kBlock = 16;
  OneSequenceCache(const CausalLM& model, int blocks)
      : groups(int(model.kv_cache_layout(kBlock).groups.size())),
        kv(model.make_kv_cache(int64_t(blocks) * groups, kBlock, 1)),
        tables(size_t(groups), std::vector<int32_t>(size_t(blocks))) {
    for (int g = 0; g < groups; ++g)
      for (int i = 0; i < blocks; ++i) tables[size_t(g)][size_t(i)] = g * blocks + i;
  }
  // Adds `tokens` at positions start.. with logits for the last `num_logits` of them.
  void add(BatchBuilder& bb, std::span<const int32_t> tokens, int32_t start,
           size_t num_logits) const {
    bb.add(tokens, start, tables, num_logits, 0);
  }
  BatchBuilder builder() const { return BatchBuilder(kBlock, groups); }

  int groups;
  KVCacheStorage kv;
  std::vector<std::vector<int32_t>> tables;
};

// [prompt.size(), vocab] logits of `prompt` (at most 48 tokens) run in one step, loaded with `o`'s
// other options; empty (with a test failure) when the model does not load.
inline std::vector<float> prompt_logits(const std::string& dir, const std::vector<int32_t>& prompt,
                                        LoadOptions o = LoadOptions()) {
  o.threads = 2;
  o.model = dir;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << (lm.ok() ? "" : lm.error().message);
  if (!lm.ok()) return {};
  OneSequenceCache cache(*(*lm)->model, 3);
  BatchBuilder bb = cache.builder();
  cache.add(bb, prompt, 0, prompt.size());
  std::vector<float> out(prompt.size() * size_t((*lm)->config.vocab_size));
  (*lm)->model->forward(bb.batch(), cache.kv, out.data());
  return out;
}

}  // namespace kestrel
