// Randomized scheduler run: many requests of random lengths sharing prefixes, random aborts and
// stops, and a KV pool small enough to force preemption, with the invariants checked every step.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"

namespace kestrel {
namespace {

struct StressCase {
  uint32_t seed;
  bool chunked;
  bool prefix_caching;
};

std::vector<int32_t> reference_outputs(const SchedulerConfig& base,
                                       const std::vector<int32_t>& prompt, int64_t max_tokens) {
  SchedulerConfig c = base;
  c.num_blocks = 256;
  c.max_num_batched_tokens = 256;
  c.enable_prefix_caching = false;
  Scheduler s(c);
  EXPECT_TRUE(s.add_request("ref", prompt, max_tokens).ok());
  for (int i = 0; i < 1000 && s.has_unfinished(); ++i) fake_step(s);
  return s.request("ref")->output_token_ids;
}

void check_queues(const Scheduler& s) {
  std::set<const Request*> waiting;
  for (const Request* r : s.waiting()) {
    EXPECT_TRUE(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted)
        << r->id << " " << status_name(r->status);
    EXPECT_EQ(r->num_computed_tokens, 0) << r->id;
    EXPECT_TRUE(waiting.insert(r).second) << r->id << " queued twice";
  }
  for (const Request* r : s.running()) {
    EXPECT_EQ(r->status, RequestStatus::kRunning) << r->id;
    EXPECT_EQ(waiting.count(r), 0u) << r->id << " both waiting and running";
  }
  EXPECT_LE(static_cast<int64_t>(s.num_running()), s.config().max_num_seqs);
  EXPECT_EQ(s.kv().num_requests(), s.num_running());
}

void run_stress(const StressCase& tc) {
  std::mt19937 rng(tc.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  SchedulerConfig c;
  c.block_size = 4;
  c.max_model_len = 64;
  c.enable_chunked_prefill = tc.chunked;
  c.enable_prefix_caching = tc.prefix_caching;
  c.max_num_batched_tokens = tc.chunked ? uniform(8, 40) : uniform(64, 96);
  c.max_num_seqs = uniform(3, 10);
  c.num_blocks = 17 + uniform(0, 8);  // 16 blocks hold one 64-token sequence
  Scheduler s(c);

  std::vector<std::vector<int32_t>> templates;
  for (int t = 0; t < 5; ++t) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back(uniform(1, 5000));
    templates.push_back(tokens);
  }

  constexpr int kNumRequests = 300;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;
  int64_t preemptions = 0;
  int steps = 0;
  while ((prompts.size() < kNumRequests || s.has_unfinished()) && steps < 20000) {
    for (int n = uniform(0, 3); n > 0 && prompts.size() < kNumRequests; --n) {
      const std::vector<int32_t>& t = templates[uniform(0, 4)];
      std::vector<int32_t> prompt(t.begin(), t.begin() + uniform(0, 40));
      for (int i = uniform(1, 20); i > 0; --i) prompt.push_back(uniform(1, 5000));
      const int64_t want = uniform(1, 30);
      const RequestId id = "r" + std::to_string(prompts.size());
      const Status st = s.add_request(id, prompt, want);
      ASSERT_EQ(st.ok(), static_cast<int64_t>(prompt.size()) < c.max_model_len) << st.message();
      prompts.push_back(prompt);
      max_tokens.push_back(want);
    }
    if (!prompts.empty() && uniform(0, 99) < 5) {
      s.abort("r" + std::to_string(uniform(0, static_cast<int>(prompts.size()) - 1)));
    }
    if (s.num_running() > 0 && uniform(0, 99) < 3) {
      s.finish(s.running()[uniform(0, static_cast<int>(s.num_running()) - 1)]->id,
               RequestStatus::kFinishedStopped);
    }

    const SchedulerOutput out = s.schedule();
    int64_t sum = 0;
    for (const ScheduledRequest& r : out.scheduled) sum += r.num_new_tokens;
    ASSERT_EQ(sum, out.total_num_scheduled_tokens);
    ASSERT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
    ASSERT_LE(static_cast<int64_t>(out.scheduled.size()), c.max_num_seqs);
    preemptions += static_cast<int64_t>(out.preempted_ids.size());
    const auto sampled = fake_run(s, out);
    if (uniform(0, 99) < 3 && !out.scheduled.empty()) {
      s.abort(out.scheduled[uniform(0, static_cast<int>(out.scheduled.size()) - 1)].id);
    }
    s.update_from_output(out, sampled);

    const std::string bad = s.kv().pool().check_invariants();
    ASSERT_TRUE(bad.empty()) << bad;
    check_queues(s);
    ++steps;
  }
  ASSERT_FALSE(s.has_unfinished()) << "stuck after " << steps << " steps";
  EXPECT_GT(preemptions, 0) << "pool never forced a preemption";
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
  EXPECT_EQ(s.kv().num_requests(), 0u);
  if (tc.prefix_caching) {
    EXPECT_GT(s.kv().prefix_cache_hits(), 0);
  }

  int completed = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Request* r = s.request("r" + std::to_string(i));
    if (r == nullptr) continue;  // rejected at admission
    ASSERT_TRUE(r->is_finished()) << r->id;
    if (r->status != RequestStatus::kFinishedLength) continue;
    ++completed;
    const int64_t expected_len =
        std::min<int64_t>(r->num_prompt_tokens() + max_tokens[i], c.max_model_len);
    EXPECT_EQ(r->num_tokens(), expected_len) << r->id;
    EXPECT_EQ(r->output_token_ids, reference_outputs(c, prompts[i], max_tokens[i])) << r->id;
  }
  EXPECT_GT(completed, kNumRequests / 3);
}

TEST(SchedulerStress, ChunkedWithPrefixCaching) {
  run_stress({11, true, true});
}
TEST(SchedulerStress, ChunkedWithoutPrefixCaching) {
  run_stress({22, true, false});
}
TEST(SchedulerStress, WholePromptsWithPrefixCaching) {
  run_stress({33, false, true});
}
TEST(SchedulerStress, WholePromptsWithoutPrefixCaching) {
  run_stress({44, false, false});
}

}  // namespace
}  // namespace kestrel
