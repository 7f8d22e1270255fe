// The engine on the MoE and MLA fixtures (Qwen3-MoE, DeepSeek-V3 in bf16, f32 and FP8): greedy
// outputs do not depend on how requests are batched, chunked or served from the prefix cache —
// the routed experts see different row sets and the latent cache different layouts in each run,
// yet every token comes out the same.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "base/mmap_file.h"
#include "engine_runs.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

class MoeEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeEngine, GreedyOutputsAreBatchInvariant) {
  const std::string dir = test::fixtures_dir() + "/models/" + GetParam();
  auto golden = read_text_file(dir + "/golden.json");
  ASSERT_TRUE(golden.ok());
  LoadOptions o;
  o.model = dir;
  o.threads = 2;
  o.dtype = nlohmann::json::parse(*golden).at("dtype").get<std::string>();
  auto lm = load_model(o);
  ASSERT_TRUE(lm.ok()) << lm.error().message;
  CausalLM& model = *(*lm)->model;
  const int32_t vocab = int32_t((*lm)->config.vocab_size);

  std::mt19937 rng(20261130);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i)
      t.push_back(std::uniform_int_distribution<int32_t>(3, vocab - 1)(rng));
    return t;
  };
  // 16 prompts of 3..60 tokens; every fourth starts with a shared 35-token prefix.
  const std::vector<int32_t> shared = random_tokens(35);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p = i % 4 == 0 ? shared : std::vector<int32_t>{};
    const std::vector<int32_t> own = random_tokens(3 + (i * 11) % 25);
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(std::move(p));
  }
  test::expect_batch_invariant(model, prompts, /*max_tokens=*/8, /*max_model_len=*/256,
                               /*chunk_budget=*/16, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeEngine,
                         ::testing::Values("qwen3_moe_bf16", "qwen3_moe_f32", "deepseek_v3_bf16",
                                           "deepseek_v3_nolora_f32", "deepseek_v3_fp8",
                                           "deepseek_v32_bf16", "deepseek_v4_window_bf16"));

}  // namespace
}  // namespace kestrel
