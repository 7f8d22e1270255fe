// Data parallelism in the engine client: two engine ranks (each its own scheduler, KV cache and
// model copy) behind one client give every request the tokens one rank gives it, share the
// load between them, send an abort to the rank that holds the request (freeing its blocks
// there), and stop together when one rank fails, ending every request with that rank's error.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine_client.h"
#include "engine/engine_runs.h"
#include "engine/fixture_models.h"
#include "model/loader.h"
#include "test_paths.h"

namespace kestrel {
namespace {

std::unique_ptr<LoadedModel> load(const std::string& fixture) {
  return test::load_fixture(fixture, 1);
}

std::vector<std::vector<int32_t>> prompts(int n) {
  std::mt19937 rng(77);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 4 + 5 * i; ++k)
      p.push_back(std::uniform_int_distribution<int32_t>(3, 500)(rng));
    out.push_back(std::move(p));
  }
  return out;
}

EngineClientOptions options(const CausalLM& model) {
  EngineClientOptions o = test::engine_options(64, true, 256);
  o.scheduler.num_blocks = 256;
  o.scheduler.kv_groups = model.kv_cache_layout(o.scheduler.block_size).groups;
  o.vocab_size = model.config().vocab_size;
  return o;
}

// A rank whose steps take at least 2 ms and work until the test arms it; its next step then
// fails, and every later one. Arming after the last submission means no request can meet a
// group that is already dead, however the threads are scheduled.
class FailingExecutor final : public Executor {
 public:
  FailingExecutor(CausalLM& model, const SchedulerConfig& c, const std::atomic<bool>& armed)
      : inner_(model, c.num_blocks, c.block_size), armed_(armed) {}
  Expected<RunnerOutput> execute(const SchedulerOutput& output) override {
    if (failed_ || armed_) {
      failed_ = true;
      return make_error("injected: the rank's worker is gone");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return inner_.execute(output);
  }
  std::optional<std::string> failure() const override {
    if (failed_) return "injected: the rank's worker is gone";
    return std::nullopt;
  }

 private:
  InProcessExecutor inner_;
  const std::atomic<bool>& armed_;
  std::atomic<bool> failed_{false};
};

class DataParallelClient : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* m : {&a_, &b_}) {
      *m = load("llama3_f32");
      ASSERT_NE(*m, nullptr);
    }
  }
  std::unique_ptr<EngineClient> two_ranks(bool slow = false) {
    EngineClientOptions o = options(*a_->model);
    for (auto* m : {&a_, &b_}) {
      if (slow) {
        o.executors.push_back(std::make_unique<test::SlowExecutor>(*(*m)->model, o.scheduler));
      } else {
        o.executors.push_back(std::make_unique<InProcessExecutor>(
            *(*m)->model, o.scheduler.num_blocks, o.scheduler.block_size));
      }
    }
    return std::make_unique<EngineClient>(nullptr, std::move(o));
  }
  std::unique_ptr<LoadedModel> a_, b_;
};

TEST_F(DataParallelClient, TokensEqualOneRankAndBothRanksWork) {
  const auto ps = prompts(8);
  const auto one_owner = build_local_engine(*a_->model, nullptr, options(*a_->model));
  EngineClient& one = *one_owner;
  const auto want = test::run_all(one, ps, 12, "one");
  auto two = two_ranks();
  ASSERT_EQ(two->num_ranks(), 2);
  const auto got = test::run_all(*two, ps, 12, "two");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].token_ids, want[i].token_ids) << "prompt " << i;
    EXPECT_EQ(got[i].token_ids.size(), 12u);
  }
  const auto ranks = two->rank_stats();
  ASSERT_EQ(ranks.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(ranks[r].counters.generation_tokens, 0) << "rank " << r << " got no request";
    EXPECT_EQ(ranks[r].kv_cache_usage, 0.0) << "rank " << r;
  }
  const EngineStats sum = two->stats();
  EXPECT_EQ(sum.counters.generation_tokens,
            ranks[0].counters.generation_tokens + ranks[1].counters.generation_tokens);
  EXPECT_EQ(sum.counters.generation_tokens, 8 * 12);
}

TEST_F(DataParallelClient, AnAbortReachesTheRankThatHoldsTheRequest) {
  auto two = two_ranks(/*slow=*/true);  // 200 tokens take at least 400 ms
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = two->add_request(test::greedy_request("long" + std::to_string(i), {5, 6, 7}, 200));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  // Wait until both ranks hold blocks, then abort everything.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = two->rank_stats();
    if (r[0].kv_cache_usage > 0 && r[1].kv_cache_usage > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int i = 0; i < 4; ++i) two->abort("long" + std::to_string(i));
  for (auto& s : streams) {
    RequestOutput all;
    while (!all.finished()) all.merge(s->next());
    EXPECT_EQ(all.finish_reason, FinishReason::kAbort);
    EXPECT_LT(all.token_ids.size(), 200u);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until && two->stats().kv_cache_usage > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (const EngineStats& r : two->rank_stats()) EXPECT_EQ(r.kv_cache_usage, 0.0);
}

TEST_F(DataParallelClient, ARankThatFailsStopsEveryRankWithItsError) {
  EngineClientOptions o = options(*a_->model);
  // Both ranks need at least 200 ms for their requests; rank 1 fails once armed below.
  std::atomic<bool> armed{false};
  o.executors.push_back(std::make_unique<test::SlowExecutor>(*a_->model, o.scheduler));
  o.executors.push_back(std::make_unique<FailingExecutor>(*b_->model, o.scheduler, armed));
  const auto two_owner = std::make_unique<EngineClient>(nullptr, std::move(o));
  EngineClient& two = *two_owner;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = two.add_request(test::greedy_request("r" + std::to_string(i), {5, 6, 7}, 100));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  armed = true;
  for (auto& s : streams) {
    RequestOutput all;
    while (!all.finished()) all.merge(s->next());
    EXPECT_EQ(all.finish_reason, FinishReason::kError);
    EXPECT_NE(all.error.find("data-parallel rank 1"), std::string::npos) << all.error;
  }
  EXPECT_TRUE(two.stats().dead);
  EXPECT_FALSE(two.add_request(test::greedy_request("late", {5}, 2)).ok());
}

// A rank inside a step that does not return (as in a Gloo collective with a peer of the failed
// group, until the collective's timeout) once it has run one step.
class StuckExecutor final : public Executor {
 public:
  StuckExecutor(CausalLM& model, const SchedulerConfig& c)
      : inner_(model, c.num_blocks, c.block_size) {}
  Expected<RunnerOutput> execute(const SchedulerOutput& output) override {
    if (steps_++ > 0) {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return released_; });
    }
    return inner_.execute(output);
  }
  std::optional<std::string> failure() const override { return std::nullopt; }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  std::atomic<int> steps_{0};

 private:
  InProcessExecutor inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

TEST_F(DataParallelClient, AShutdownAfterAFailureDoesNotWaitForARankStuckInAStep) {
  EngineClientOptions o = options(*a_->model);
  std::atomic<bool> armed{false};
  auto stuck = std::make_unique<StuckExecutor>(*a_->model, o.scheduler);
  StuckExecutor* stuck_rank = stuck.get();
  o.executors.push_back(std::move(stuck));
  o.executors.push_back(std::make_unique<FailingExecutor>(*b_->model, o.scheduler, armed));
  auto two = std::make_unique<EngineClient>(nullptr, std::move(o));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = two->add_request(test::greedy_request("r" + std::to_string(i), {5, 6, 7}, 50));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stuck_rank->steps_ < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(stuck_rank->steps_, 2) << "rank 0 never reached its stuck step";
  armed = true;
  while (!two->stats().dead && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(two->stats().dead);
  // Without the bound, the shutdown would wait until the release below.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::seconds(12));
    stuck_rank->release();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(two->shutdown(std::chrono::milliseconds(0)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.9 * EngineClient::kFailedStopGrace.count());
  EXPECT_LT(seconds, EngineClient::kFailedStopGrace.count() + 3.0);
  releaser.join();
  two.reset();  // the released rank stops; the destructor joins it
  for (auto& s : streams) {
    RequestOutput all;
    while (!all.finished()) all.merge(s->next());
    EXPECT_EQ(all.finish_reason, FinishReason::kError) << all.error;
  }
}

// A healthy rank in a long step is waited for: nothing is cut short without a failure.
TEST_F(DataParallelClient, AShutdownWaitsForAHealthyRanksStep) {
  EngineClientOptions o = options(*a_->model);
  auto stuck = std::make_unique<StuckExecutor>(*a_->model, o.scheduler);
  StuckExecutor* stuck_rank = stuck.get();
  o.executors.push_back(std::move(stuck));
  o.executors.push_back(std::make_unique<InProcessExecutor>(*b_->model, o.scheduler.num_blocks,
                                                            o.scheduler.block_size));
  const auto two_owner = std::make_unique<EngineClient>(nullptr, std::move(o));
  EngineClient& two = *two_owner;
  auto s = two.add_request(test::greedy_request("r", {5, 6, 7}, 50));
  ASSERT_TRUE(s.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stuck_rank->steps_ < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(stuck_rank->steps_, 2);
  std::thread releaser([&] {
    std::this_thread::sleep_for(EngineClient::kFailedStopGrace + std::chrono::seconds(1));
    stuck_rank->release();
  });
  EXPECT_TRUE(two.shutdown(std::chrono::milliseconds(0)));
  releaser.join();
}

}  // namespace
}  // namespace kestrel
