// Sliding-window models through the whole engine (scheduler, KV groups, runner): a long request
// keeps only the blocks its window covers in each sliding group while its full-attention group
// grows, its tokens do not depend on the block size (so on which blocks were dropped), and a
// warm prefix cache serves it again from the blocks covering the last window.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/request_names.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

constexpr int64_t kOutputs = 150;

class SlidingWindowEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = test::fixtures_dir() + "/models/" + GetParam();
    LoadOptions o;
    o.model = dir;
    o.threads = 2;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m);
    auto text = read_text_file(dir + "/golden.json");
    ASSERT_TRUE(text.ok()) << text.error().message;
    auto j = nlohmann::json::parse(*text);
    prompt_ = j.at("prompts").at(2).get<std::vector<int32_t>>();  // the 40-token one
    greedy_ = j.at("greedy").at(2).get<std::vector<int32_t>>();
  }

  SchedulerConfig config(int32_t block_size) const {
    SchedulerConfig c;
    c.block_size = block_size;
    c.num_blocks = 1024;
    c.max_model_len = 256;
    c.max_num_batched_tokens = 16;  // the prompt is prefilled in chunks across the window
    return c;
  }

  struct Run {
    std::vector<int32_t> tokens;
    int64_t num_cached_tokens = 0;
    // Per KV group, the most blocks the request held after any step.
    std::vector<int64_t> max_held;
  };

  // Runs request `id` to the end, recording its block usage per group after every step.
  Run run(EngineCore& engine, const std::string& id) const {
    EXPECT_TRUE(engine.add_request(test::greedy_core_request(id, prompt_, kOutputs)).ok());
    const KVCacheManager& kv = engine.scheduler().kv();
    Run out;
    out.max_held.assign(kv.num_groups(), 0);
    for (int steps = 0; engine.has_unfinished() && steps < 1000; ++steps) {
      auto outs = engine.step();
      EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        out.tokens.insert(out.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        out.num_cached_tokens = o.num_cached_tokens;
      }
      for (size_t g = 0; g < kv.num_groups(); ++g)
        out.max_held[g] = std::max(out.max_held[g], kv.num_held_blocks(test::handle(id), g));
    }
    EXPECT_EQ(kv.num_requests(), 0u);
    EXPECT_EQ(test::worker_requests(engine), 0u);
    return out;
  }

  std::unique_ptr<LoadedModel> lm_;
  std::vector<int32_t> prompt_, greedy_;
};

TEST_P(SlidingWindowEngine, LongRequestHoldsOnlyItsWindowPerSlidingGroup) {
  const int32_t bs = 4;
  const auto engine_core = build_local_core(*lm_->model, config(bs), {});
  EngineCore& engine = *engine_core;
  const KVCacheManager& kv = engine.scheduler().kv();
  const Run r = run(engine, "long");
  ASSERT_EQ(r.tokens.size(), size_t(kOutputs));
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 16), greedy_);
  const int64_t total = int64_t(prompt_.size()) + kOutputs;
  bool any_sliding = false;
  for (size_t g = 0; g < kv.num_groups(); ++g) {
    const KVCacheSpec& spec = kv.group_spec(g);
    if (spec.kind == KVCacheKind::kSlidingWindow) {
      any_sliding = true;
      // A step of up to 16 tokens needs the window before its first token and its own slots:
      // (W - 1 + 16) tokens, one block more when they start mid-block.
      const int64_t bound = (spec.sliding_window - 1 + 16 + bs - 1) / bs + 1;
      EXPECT_LE(r.max_held[g], bound) << "group " << g;
      EXPECT_GE(r.max_held[g], (spec.sliding_window + bs - 1) / bs) << "group " << g;
    } else {
      // Full attention keeps every block. Usage is read after each step and the last step
      // frees the request, so the most seen is after the step before: total - 2 slots.
      EXPECT_EQ(r.max_held[g], (total - 2 + bs - 1) / bs) << "group " << g;
    }
  }
  EXPECT_TRUE(any_sliding);
}

TEST_P(SlidingWindowEngine, TokensDoNotDependOnBlockSizeAndWarmCacheHits) {
  std::vector<int32_t> reference;
  {
    const auto engine_core = build_local_core(*lm_->model, config(16), {});
    EngineCore& engine = *engine_core;
    reference = run(engine, "a").tokens;
  }
  ASSERT_EQ(reference.size(), size_t(kOutputs));
  const auto engine_core = build_local_core(*lm_->model, config(4), {});
  EngineCore& engine = *engine_core;
  EXPECT_EQ(run(engine, "cold").tokens, reference);
  // The prompt's 9 full blocks are hit: the full-attention groups keep them all, the sliding
  // ones the blocks of the last window, dropped from the request but still cached.
  const Run warm = run(engine, "warm");
  EXPECT_EQ(warm.tokens, reference);
  EXPECT_EQ(warm.num_cached_tokens, int64_t(prompt_.size() - 1) / 4 * 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SlidingWindowEngine,
                         ::testing::Values("mistral_f32", "mistral_bf16", "qwen2_sliding_f32",
                                           "gemma3_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kestrel
