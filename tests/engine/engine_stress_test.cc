// A randomized engine-level stress test on a real (tiny) model: thousands of requests of random
// lengths and sampling settings arrive over time, some are aborted at random moments, and a
// small KV pool forces preemption. After every step the pool must be consistent with the
// requests' block tables; at the end every request has finished or been aborted, the pool is
// fully free, and greedy requests that ran to the end match a solo run of the same prompt.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/request_names.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

struct Tracked {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  int64_t max_tokens = 0;
  bool greedy = false;
  bool finished = false;
  std::optional<FinishReason> reason;
};

class EngineStress : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    LoadOptions o;
    o.model = test::fixtures_dir() + "/models/llama3_f32";
    o.threads = 1;
    auto m = load_model(o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    lm_ = std::move(*m);
  }

  // Every block in a request's table is referenced once per holder, and nothing else is.
  static void check_pool(const EngineCore& engine) {
    const Scheduler& s = engine.scheduler();
    const BlockPool& pool = s.kv().pool();
    ASSERT_EQ(pool.check_invariants(), "");
    std::map<BlockId, int32_t> holders;
    auto count = [&](const Request* r) {
      for (BlockId b : s.kv().block_table(r->id)) ++holders[b];
    };
    for (const Request* r : s.running()) count(r);
    for (const Request* r : s.waiting()) count(r);
    int32_t in_use = 0;
    for (BlockId b = 1; b < pool.num_blocks(); ++b) {
      const auto it = holders.find(b);
      const int32_t expected = it == holders.end() ? 0 : it->second;
      ASSERT_EQ(pool.ref_count(b), expected) << "block " << b;
      in_use += expected > 0 ? 1 : 0;
    }
    ASSERT_EQ(pool.num_free() + in_use, pool.num_blocks() - 1);
    ASSERT_EQ(holders.count(0), 0u) << "the null block is never handed out";
  }

  std::unique_ptr<LoadedModel> lm_;
};

TEST_P(EngineStress, RandomArrivalsAbortsAndPreemption) {
  std::mt19937 rng(GetParam());
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 33;  // 128 token slots: a handful of requests at once
  c.max_model_len = 96;
  c.max_num_seqs = uniform(4, 16);
  c.max_num_batched_tokens = uniform(8, 64);
  ASSERT_TRUE(validate(c).ok());
  const auto engine_core = build_local_core(*lm_->model, c, {2});
  EngineCore& engine = *engine_core;

  // Shared prefixes make prefix-cache hits (and their eviction) part of the workload.
  std::vector<std::vector<int32_t>> prefixes(4);
  for (auto& p : prefixes)
    for (int i = 0, n = uniform(4, 24); i < n; ++i) p.push_back(uniform(3, 511));

  constexpr int kRequests = 2000;
  std::map<std::string, Tracked> tracked;
  std::vector<std::string> live;
  int submitted = 0, aborted = 0;
  int64_t steps = 0;
  while (submitted < kRequests || engine.has_unfinished()) {
    ASSERT_LT(steps, 200000) << "the engine does not drain";
    for (int n = uniform(0, 3); n > 0 && submitted < kRequests; --n) {
      Tracked t;
      if (uniform(0, 1)) t.prompt = prefixes[size_t(uniform(0, 3))];
      for (int i = 0, k = uniform(1, 40); i < k; ++i) t.prompt.push_back(uniform(3, 511));
      t.max_tokens = uniform(1, 12);
      t.greedy = uniform(0, 2) > 0;
      EngineRequest r;
      const std::string name = "r" + std::to_string(submitted++);
      r.id = test::handle(name);
      r.prompt_token_ids = t.prompt;
      r.max_tokens = t.max_tokens;
      r.sampling.temperature = t.greedy ? 0.0f : 0.8f;
      r.sampling.top_k = t.greedy ? 0 : 20;
      r.seed = uint64_t(submitted);
      r.ignore_eos = uniform(0, 3) > 0;
      ASSERT_TRUE(engine.add_request(r).ok());
      live.push_back(name);
      tracked[name] = std::move(t);
    }
    if (!live.empty() && uniform(0, 9) == 0) {
      const size_t i = size_t(uniform(0, int(live.size()) - 1));
      engine.abort(test::handle(live[i]));
      ++aborted;
    }
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok()) << outs.error().message;
    ++steps;
    for (EngineCoreOutput& o : *outs) {
      Tracked& t = tracked.at(test::name_of(o.id));
      ASSERT_FALSE(t.finished) << test::name_of(o.id) << " output after finishing";
      t.tokens.insert(t.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      ASSERT_EQ(o.num_output_tokens, int64_t(t.tokens.size()));
      if (o.finished()) {
        t.finished = true;
        t.reason = o.finish_reason;
        live.erase(std::find(live.begin(), live.end(), test::name_of(o.id)));
      }
    }
    check_pool(engine);
    if (HasFatalFailure()) FAIL() << "after step " << steps;
  }

  EXPECT_EQ(engine.scheduler().kv().pool().num_free(), c.num_blocks - 1);
  EXPECT_EQ(test::worker_requests(engine), 0u);
  EXPECT_EQ(engine.scheduler().kv().num_requests(), 0u);
  EXPECT_GT(engine.scheduler().num_preemptions(), 0) << "the pool was meant to force preemption";
  EXPECT_GT(engine.scheduler().kv().prefix_cache_hits(), 0);
  int finished_aborted = 0;
  for (const auto& [id, t] : tracked) {
    ASSERT_TRUE(t.finished) << id;
    if (*t.reason == FinishReason::kAbort) {
      ++finished_aborted;
      continue;
    }
    EXPECT_GE(t.tokens.size(), 1u);
    EXPECT_LE(int64_t(t.tokens.size()), t.max_tokens);
  }
  EXPECT_GT(finished_aborted, 0);
  EXPECT_LE(finished_aborted, aborted);

  // Batch invariance under this churn: greedy requests that ran to max_tokens equal solo runs.
  const auto solo_core = build_local_core(*lm_->model, c, {2});
  EngineCore& solo = *solo_core;
  int compared = 0;
  for (const auto& [id, t] : tracked) {
    if (!t.greedy || t.reason != FinishReason::kLength || compared >= 40) continue;
    ASSERT_TRUE(
        solo.add_request(test::greedy_core_request("solo-" + id, t.prompt, t.max_tokens)).ok());
    std::vector<int32_t> tokens;
    while (solo.has_unfinished()) {
      auto outs = solo.step();
      ASSERT_TRUE(outs.ok());
      for (const auto& o : *outs)
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
    EXPECT_EQ(tokens, t.tokens) << id;
    ++compared;
  }
  EXPECT_GE(compared, 20);
}

INSTANTIATE_TEST_SUITE_P(Seeds, EngineStress, ::testing::Values(1u, 20261130u));

}  // namespace
}  // namespace kestrel
