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

// [prompt.size(), vocab] logits of `prompt` (at most 48 tokens) run in one step, loaded with `o`'s
// other options; empty (with a test failure) when the model does not load.
inline std::vector<float> prompt_logits(const std::string& dir, const std::vector<int32_t>& prompt,
                                        LoadOptions o = LoadOptions()) {
  o.threads = 2;
  o.model = dir;
  auto lm = load_model(o);
  EXPECT_TRUE(lm.ok()) << (lm.ok() ? "" : lm.error().message);
  if (!lm.ok()) return {};
  KVCacheStorage kv = (*lm)->model->make_kv_cache(8, 16);
  BatchBuilder bb(16, kv.num_groups());
  const std::vector<int32_t> table = {1, 2, 3};
  bb.add(prompt, 0, std::span<const int32_t>(table), prompt.size());
  std::vector<float> out(prompt.size() * size_t((*lm)->config.vocab_size));
  (*lm)->model->forward(bb.batch(), kv, out.data());
  return out;
}

}  // namespace kestrel
