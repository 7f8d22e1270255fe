// The engine on the default model (SmolLM2-135M-Instruct, Q4_1 GGUF): greedy outputs do not depend
// on how requests are batched, chunked or served from the prefix cache, and a shared 1,000-token
// system prompt is computed once across 50 requests. Skipped when the model was not fetched (failed
// under KESTREL_REQUIRE_TEST_DATA).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "engine/engine_client.h"
#include "engine_runs.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using test::run_all;

class DefaultModelEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::default_model_path();
    if (!std::filesystem::exists(path)) return;  // SetUp skips or fails
    LoadOptions o;
    o.model = path;
    o.threads = 2;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    KESTREL_SKIP_IF_ABSENT(test::default_model_path(), "the default model");
    ASSERT_NE(model_, nullptr) << "the default model is present but did not load";
  }

  static std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
    std::vector<int32_t> t;
    // Ordinary (non-special) ids of the 49,152-token vocabulary.
    for (int i = 0; i < n; ++i)
      t.push_back(std::uniform_int_distribution<int32_t>(100, 49000)(rng));
    return t;
  }

  static LoadedModel* model_;
};

LoadedModel* DefaultModelEngine::model_ = nullptr;

TEST_F(DefaultModelEngine, GreedyOutputsAreBatchInvariant) {
  std::mt19937 rng(20261130);
  // 32 prompts of mixed lengths; some share a prefix so the warm run also hits mid-prompt.
  const std::vector<int32_t> shared = random_tokens(rng, 40);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p = i % 4 == 0 ? shared : std::vector<int32_t>{};
    const std::vector<int32_t> own = random_tokens(rng, 3 + (i * 7) % 50);
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(std::move(p));
  }
  test::expect_batch_invariant(*model_->model, prompts, /*max_tokens=*/6, /*max_model_len=*/2048,
                               /*chunk_budget=*/64, "default model");
}

TEST_F(DefaultModelEngine, SharedSystemPromptIsComputedOnce) {
  std::mt19937 rng(7);
  const std::vector<int32_t> system = random_tokens(rng, 1000);
  std::vector<std::vector<int32_t>> prompts;
  int64_t submitted = 0;
  for (int i = 0; i < 50; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> question = random_tokens(rng, 12 + i % 9);
    p.insert(p.end(), question.begin(), question.end());
    submitted += int64_t(p.size());
    prompts.push_back(std::move(p));
  }
  const auto client_owner =
      build_local_engine(*model_->model, nullptr, test::engine_options(2048, true));
  EngineClient& client = *client_owner;
  const std::vector<RequestOutput> outs = run_all(client, prompts, 1, "sys");
  // Every request but the first reuses the 62 full blocks (992 tokens) of the system prompt.
  int64_t cached = 0, zero = 0;
  for (const RequestOutput& o : outs) {
    cached += o.num_cached_tokens;
    if (o.num_cached_tokens == 0) {
      ++zero;
    } else {
      EXPECT_EQ(o.num_cached_tokens, 992);
    }
  }
  EXPECT_EQ(zero, 1);
  EXPECT_EQ(cached, 49 * 992);
  const EngineStats s = client.stats();
  EXPECT_EQ(s.prefix_cache_hits, 49 * 992);
  EXPECT_EQ(s.prefix_cache_queries, submitted);
  EXPECT_EQ(s.counters.prompt_tokens_computed, submitted - 49 * 992);
  const double reduction = 1.0 - double(s.counters.prompt_tokens_computed) / double(submitted);
  EXPECT_GE(reduction, 0.90) << "prompt tokens computed: " << s.counters.prompt_tokens_computed
                             << " of " << submitted;
  RecordProperty("prefill_reduction", std::to_string(reduction));
}

}  // namespace
}  // namespace kestrel
