// Hybrid models (Gated DeltaNet + gated attention: Qwen3-Next, Qwen3.5) through the whole engine.
// Each running request's recurrent state lives in its own slot, so batching, chunked prefill at
// odd sizes, waiting for a free slot and preemption all give the transformers reference's greedy
// tokens. With prefix caching a repeated or extended prompt resumes from a state checkpoint at a
// block boundary — also one that a request's decoding kept, for a chat's next turn: the same
// tokens as a cold run, the cached-token count the checkpoint allows, and nothing hit without
// checkpoints.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/fixture_models.h"
#include "engine/request_names.h"

namespace kestrel {
namespace {

struct Result {
  std::vector<int32_t> tokens;
  int64_t num_cached_tokens = 0;
};

class HybridEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    lm_ = test::load_fixture(GetParam(), 2);
    ASSERT_TRUE(lm_);
    const test::FixtureGolden g = test::read_fixture_golden(GetParam());
    prompts_ = g.prompts;
    greedy_ = g.greedy;
    ASSERT_EQ(prompts_.size(), 3u);
  }

  SchedulerConfig config(int64_t budget, bool prefix_caching, int32_t checkpoints = 0) const {
    SchedulerConfig c;
    c.block_size = 4;  // several boundaries inside every prompt
    c.num_blocks = 256;
    c.max_model_len = 128;
    c.max_num_seqs = 4;
    c.max_num_batched_tokens = budget;
    c.enable_prefix_caching = prefix_caching;
    c.num_state_checkpoints = checkpoints;
    return c;
  }

  void add(EngineCore& engine, const std::string& id, const std::vector<int32_t>& prompt,
           int64_t outputs = 16) const {
    ASSERT_TRUE(engine.add_request(test::greedy_core_request(id, prompt, outputs)).ok());
  }

  static std::map<std::string, Result> run(EngineCore& engine, int* preemptions = nullptr) {
    std::map<std::string, Result> out;
    for (int steps = 0; engine.has_unfinished() && steps < 2000; ++steps) {
      auto outs = engine.step();
      EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
      if (!outs.ok()) break;
      for (const EngineCoreOutput& o : *outs) {
        Result& r = out[test::name_of(o.id)];
        r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        r.num_cached_tokens = o.num_cached_tokens;
      }
      if (preemptions)
        for (const Request* r : engine.scheduler().waiting())
          if (r->num_output_tokens() > 0) ++*preemptions;
    }
    EXPECT_FALSE(engine.has_unfinished());
    EXPECT_EQ(test::worker_requests(engine), 0u);
    EXPECT_EQ(engine.scheduler().kv().usage(), 0.0);
    return out;
  }

  std::unique_ptr<LoadedModel> lm_;
  std::vector<std::vector<int32_t>> prompts_, greedy_;
};

TEST_P(HybridEngine, BatchedAndOddChunkedRunsMatchReference) {
  for (const int64_t budget : {int64_t{256}, int64_t{7}}) {
    const auto engine_core = build_local_core(*lm_->model, config(budget, false), {});
    EngineCore& engine = *engine_core;
    for (size_t p = 0; p < 3; ++p) add(engine, std::to_string(p), prompts_[p]);
    auto results = run(engine);
    for (size_t p = 0; p < 3; ++p)
      EXPECT_EQ(results[std::to_string(p)].tokens, greedy_[p])
          << "budget " << budget << " prompt " << p;
  }
}

TEST_P(HybridEngine, RequestsWaitForAFreeStateSlot) {
  SchedulerConfig c = config(256, false);
  c.max_num_seqs = 1;  // one state slot: the requests run one after another, reusing it
  const auto engine_core = build_local_core(*lm_->model, c, {});
  EngineCore& engine = *engine_core;
  for (size_t p = 0; p < 3; ++p) add(engine, std::to_string(p), prompts_[p]);
  auto results = run(engine);
  for (size_t p = 0; p < 3; ++p)
    EXPECT_EQ(results[std::to_string(p)].tokens, greedy_[p]) << "prompt " << p;
}

TEST_P(HybridEngine, PreemptionRestartsFromAZeroState) {
  SchedulerConfig c = config(16, false);
  c.block_size = 16;
  c.max_model_len = 64;
  c.kv_groups = lm_->model->kv_cache_layout(c.block_size).groups;
  // One request of max_model_len fits, the three together do not.
  c.num_blocks =
      1 + int32_t(max_blocks_per_request(c.kv_groups, c.max_model_len, c.max_num_batched_tokens));
  ASSERT_TRUE(validate(c).ok());
  const auto engine_core = build_local_core(*lm_->model, c, {});
  EngineCore& engine = *engine_core;
  for (size_t p = 0; p < 3; ++p) add(engine, std::to_string(p), prompts_[p]);
  int preemptions = 0;
  auto results = run(engine, &preemptions);
  EXPECT_GT(preemptions, 0) << "the pool was meant to force preemption";
  for (size_t p = 0; p < 3; ++p)
    EXPECT_EQ(results[std::to_string(p)].tokens, greedy_[p]) << "prompt " << p;
}

TEST_P(HybridEngine, RepeatedPromptsResumeFromStateCheckpoints) {
  for (const int64_t budget : {int64_t{256}, int64_t{7}}) {
    const auto engine_core = build_local_core(*lm_->model, config(budget, true, 32), {});
    EngineCore& engine = *engine_core;
    for (size_t p = 0; p < 3; ++p) add(engine, "cold" + std::to_string(p), prompts_[p]);
    auto cold = run(engine);
    const int64_t hits_before = engine.scheduler().kv().prefix_cache_hits();
    for (size_t p = 0; p < 3; ++p) add(engine, "warm" + std::to_string(p), prompts_[p]);
    auto warm = run(engine);
    int64_t cached = 0;
    for (size_t p = 0; p < 3; ++p) {
      const std::string n = std::to_string(p);
      EXPECT_EQ(cold["cold" + n].tokens, greedy_[p]) << "budget " << budget << " prompt " << p;
      EXPECT_EQ(cold["cold" + n].num_cached_tokens, 0);
      EXPECT_EQ(warm["warm" + n].tokens, greedy_[p]) << "budget " << budget << " prompt " << p;
      // The last boundary before the prompt's last token, whose state the cold run kept.
      EXPECT_EQ(warm["warm" + n].num_cached_tokens, int64_t(prompts_[p].size() - 1) / 4 * 4)
          << "budget " << budget << " prompt " << p;
      cached += warm["warm" + n].num_cached_tokens;
    }
    // Those tokens were not computed again: the cache served them.
    EXPECT_EQ(engine.scheduler().kv().prefix_cache_hits() - hits_before, cached);
  }
}

TEST_P(HybridEngine, AnExtendedPromptResumesWhereTheFirstOneLeftItsState) {
  std::vector<int32_t> extended = prompts_[1];
  extended.insert(extended.end(), prompts_[0].begin(), prompts_[0].end());
  std::vector<int32_t> reference;
  {
    const auto cold_core = build_local_core(*lm_->model, config(256, false), {});
    EngineCore& cold = *cold_core;
    add(cold, "x", extended);
    reference = run(cold)["x"].tokens;
  }
  ASSERT_EQ(reference.size(), 16u);
  const auto engine_core = build_local_core(*lm_->model, config(256, true, 8), {});
  EngineCore& engine = *engine_core;
  add(engine, "first", prompts_[1]);
  run(engine);
  add(engine, "extended", extended);
  const Result r = run(engine)["extended"];
  EXPECT_EQ(r.tokens, reference);
  EXPECT_EQ(r.num_cached_tokens, int64_t(prompts_[1].size() - 1) / 4 * 4);
}

// A chat's next turn repeats the first turn's prompt and answer: it resumes from the state the
// first request's decoding kept at its last block boundary, past its prompt, and gives the
// tokens of a cold run.
TEST_P(HybridEngine, ANextTurnResumesFromTheAnswersLastBoundary) {
  const auto engine_core = build_local_core(*lm_->model, config(256, true, 16), {});
  EngineCore& engine = *engine_core;
  add(engine, "first", prompts_[1]);
  const Result first = run(engine)["first"];
  ASSERT_EQ(first.tokens, greedy_[1]);
  std::vector<int32_t> next = prompts_[1];
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  next.insert(next.end(), prompts_[0].begin(), prompts_[0].end());
  std::vector<int32_t> reference;
  {
    const auto cold_core = build_local_core(*lm_->model, config(256, false), {});
    EngineCore& cold = *cold_core;
    add(cold, "x", next);
    reference = run(cold)["x"].tokens;
  }
  add(engine, "next", next);
  const Result r = run(engine)["next"];
  EXPECT_EQ(r.tokens, reference);
  // The first request's K/V covers all its tokens but the last sampled one (19 + 16 - 1 = 34):
  // its last boundary is 32, past the prompt's last one (16).
  const int64_t computed = int64_t(prompts_[1].size() + first.tokens.size()) - 1;
  EXPECT_EQ(r.num_cached_tokens, computed / 4 * 4);
  EXPECT_GT(r.num_cached_tokens, int64_t(prompts_[1].size()));
}

TEST_P(HybridEngine, WithoutCheckpointsNothingIsHit) {
  const auto engine_core = build_local_core(*lm_->model, config(256, true, 0), {});
  EngineCore& engine = *engine_core;
  add(engine, "a", prompts_[2]);
  run(engine);
  add(engine, "b", prompts_[2]);
  const Result r = run(engine)["b"];
  EXPECT_EQ(r.tokens, greedy_[2]);
  EXPECT_EQ(r.num_cached_tokens, 0);
}

TEST_P(HybridEngine, EvictedCheckpointsAreNotHit) {
  // Two checkpoints: the second prompt's (its last boundary before its last token, and its end,
  // 40 tokens) take them over from the first's. One output each, so that no decoding step
  // saves one more.
  const auto engine_core = build_local_core(*lm_->model, config(256, true, 2), {});
  EngineCore& engine = *engine_core;
  add(engine, "a", prompts_[1], 1);
  run(engine);
  add(engine, "b", prompts_[2], 1);
  run(engine);
  // again_b first: again_a's own save would otherwise take the one checkpoint before again_b
  // looks it up.
  add(engine, "again_b", prompts_[2], 1);
  add(engine, "again_a", prompts_[1], 1);
  auto results = run(engine);
  EXPECT_EQ(results["again_a"].tokens, std::vector<int32_t>(1, greedy_[1][0]));
  EXPECT_EQ(results["again_a"].num_cached_tokens, 0);
  EXPECT_EQ(results["again_b"].tokens, std::vector<int32_t>(1, greedy_[2][0]));
  EXPECT_EQ(results["again_b"].num_cached_tokens, int64_t(prompts_[2].size() - 1) / 4 * 4);
}

// Decoding keeps one checkpoint per request: a request's newer one replaces its older one, so
// two checkpoint slots are enough for a prompt's own and the answer's latest.
TEST_P(HybridEngine, DecodingKeepsOnlyItsLatestCheckpoint) {
  const auto engine_core = build_local_core(*lm_->model, config(256, true, 2), {});
  EngineCore& engine = *engine_core;
  add(engine, "first", prompts_[2]);
  const Result first = run(engine)["first"];
  // The repeat resumes from the prompt's checkpoint (its boundary before the last token): the
  // decoding's checkpoints did not evict it.
  add(engine, "repeat", prompts_[2]);
  EXPECT_EQ(run(engine)["repeat"].num_cached_tokens, int64_t(prompts_[2].size() - 1) / 4 * 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridEngine,
                         ::testing::Values("qwen3_next_f32", "qwen3_5_f32", "qwen3_5_moe_f32",
                                           "qwen3_5_bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kestrel
