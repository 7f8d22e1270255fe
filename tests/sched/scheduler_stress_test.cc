// Randomized scheduler run: many requests of random lengths sharing prefixes, random aborts and
// stops, and a KV pool small enough to force preemption, with the invariants checked every step;
// optionally drafts (random, or the worker's own tokens with some corrupted), stop rules and
// worker failures too. Every request that ends on its own must produce the outputs it produces
// when run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

struct StressCase {
  uint32_t seed;
  bool chunked;
  bool prefix_caching;
  bool drafts = false;  // also stop rules and worker failures
};

SchedulerConfig reference_config(const SchedulerConfig& base) {
  SchedulerConfig c = base;
  c.num_blocks = 256;
  c.max_num_batched_tokens = 256;
  c.enable_prefix_caching = false;
  return c;
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
    EXPECT_LT(r->num_computed_tokens, r->num_tokens()) << r->id;
  }
  EXPECT_LE(static_cast<int64_t>(s.num_running()), s.config().max_num_seqs);
  EXPECT_EQ(s.kv().num_requests(), s.num_running());
}

// The worker's copy of every unfinished request it knows matches the scheduler's.
void check_worker_agrees(const Scheduler& s, const FakeWorker& w) {
  auto check = [&](const Request* r) {
    if (const FakeWorker::State* st = w.find(r->id)) {
      EXPECT_EQ(st->tokens, r->all_token_ids) << r->id;
    }
  };
  for (const Request* r : s.running()) check(r);
  for (const Request* r : s.waiting()) check(r);
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
  FakeWorker w(c);

  std::vector<std::vector<int32_t>> templates;
  for (int t = 0; t < 5; ++t) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back(uniform(1, 5000));
    templates.push_back(tokens);
  }

  constexpr int kNumRequests = 300;
  std::vector<RequestSpec> specs;
  std::unordered_set<RequestHandle> cut_short;  // aborted, failed or stopped by the engine
  int64_t preemptions = 0;
  int64_t failures = 0;
  int steps = 0;
  while ((specs.size() < kNumRequests || s.has_unfinished()) && steps < 20000) {
    for (int n = uniform(0, 3); n > 0 && specs.size() < kNumRequests; --n) {
      const std::vector<int32_t>& t = templates[uniform(0, 4)];
      std::vector<int32_t> prompt(t.begin(), t.begin() + uniform(0, 40));
      for (int i = uniform(1, 20); i > 0; --i) prompt.push_back(uniform(1, 5000));
      RequestSpec r = spec(RequestHandle(1000 + specs.size()), prompt, uniform(1, 30));
      if (tc.drafts && uniform(0, 99) < 40 && static_cast<int64_t>(prompt.size()) < 63) {
        // A stop rule on a token it will produce: as EOS, a listed stop id, or both.
        const std::vector<int32_t> outs = reference_outputs(r, reference_config(c));
        const int32_t token = outs[uniform(0, static_cast<int>(outs.size()) - 1)];
        const int kind = uniform(0, 2);
        if (kind != 1) r.stop.eos_token_ids = {token, 30001};
        if (kind != 0) r.stop.stop_token_ids = {30002, token};
        r.stop.min_tokens = uniform(0, 4);
      }
      const Status st = s.add_request(r);
      ASSERT_EQ(st.ok(), static_cast<int64_t>(prompt.size()) < c.max_model_len) << st.message();
      specs.push_back(std::move(r));
    }
    if (!specs.empty() && uniform(0, 99) < 5) {
      const RequestHandle id = RequestHandle(1000 + uniform(0, static_cast<int>(specs.size()) - 1));
      const Request* r = s.request(id);
      if (r != nullptr && !r->is_finished()) cut_short.insert(id);
      s.abort(id);
    }
    if (s.num_running() > 0 && uniform(0, 99) < 3) {
      const RequestHandle id = s.running()[uniform(0, static_cast<int>(s.num_running()) - 1)]->id;
      cut_short.insert(id);
      s.finish(id, RequestStatus::kFinishedStopped);
    }
    if (tc.drafts) {
      std::vector<const Request*> live(s.running().begin(), s.running().end());
      live.insert(live.end(), s.waiting().begin(), s.waiting().end());
      for (const Request* r : live) {
        if (uniform(0, 99) >= 40) continue;
        const int k = uniform(1, 6);
        std::vector<int32_t> drafts;
        if (uniform(0, 3) == 0) {
          for (int i = 0; i < k; ++i) drafts.push_back(uniform(1, 30000));
        } else {
          drafts = fake_continuation(r->all_token_ids, k);
          if (uniform(0, 1) == 0) drafts[uniform(0, k - 1)] = uniform(1, 30000);
        }
        s.set_draft_tokens(r->id, std::move(drafts));
      }
    }

    const SchedulerOutput out = s.schedule();
    int64_t sum = 0;
    for (const ScheduledTokens& r : out.scheduled) sum += r.num_tokens;
    ASSERT_EQ(sum, out.total_num_scheduled_tokens);
    ASSERT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
    ASSERT_LE(static_cast<int64_t>(out.scheduled.size()), c.max_num_seqs);
    preemptions += static_cast<int64_t>(out.preempted_ids.size());
    ASSERT_EQ(s.num_preemptions(), preemptions);
    if (tc.drafts && uniform(0, 99) < 2 && !out.scheduled.empty()) {
      w.fail_next(out.scheduled[uniform(0, static_cast<int>(out.scheduled.size()) - 1)].id);
    }
    RunnerOutput result = w.execute(out);
    RequestHandle aborted;
    if (uniform(0, 99) < 3 && !out.scheduled.empty()) {
      aborted = out.scheduled[uniform(0, static_cast<int>(out.scheduled.size()) - 1)].id;
      cut_short.insert(aborted);
      s.abort(aborted);
    }
    const std::vector<RequestUpdate> updates = s.update_from_output(out, result);
    std::erase_if(result.sampled, [&](const RequestSamples& x) { return x.id == aborted; });
    check_updates(out, result, updates);
    for (const RequestUpdate& u : updates) {
      const Request* r = s.request(u.id);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(u.finished.has_value(), r->is_finished()) << u.id;
      if (u.finished) {
        EXPECT_EQ(*u.finished, r->status) << u.id;
      }
      EXPECT_EQ(u.stop_token_id, r->stop_token_id) << u.id;
    }
    // The engine core ends the requests the worker failed.
    failures += static_cast<int64_t>(result.failures.size());
    for (const RequestFailure& f : result.failures) {
      const Request* r = s.request(f.id);
      ASSERT_NE(r, nullptr);
      EXPECT_TRUE(r->is_finished() || r->status == RequestStatus::kRunning) << f.id;
      if (!r->is_finished()) cut_short.insert(f.id);
      s.abort(f.id);
    }

    const std::string bad = s.kv().pool().check_invariants();
    ASSERT_TRUE(bad.empty()) << bad;
    check_queues(s);
    check_worker_agrees(s, w);
    ++steps;
  }
  ASSERT_FALSE(s.has_unfinished()) << "stuck after " << steps << " steps";
  EXPECT_GT(preemptions, 0) << "pool never forced a preemption";
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
  EXPECT_EQ(s.kv().num_requests(), 0u);
  if (tc.prefix_caching) {
    EXPECT_GT(s.kv().prefix_cache_hits(), 0);
  }
  // The last finished ids reach the worker, which then holds nothing.
  const SchedulerOutput last = s.schedule();
  EXPECT_TRUE(last.scheduled.empty());
  w.execute(last);
  EXPECT_EQ(w.num_requests(), 0u);
  if (tc.drafts) {
    EXPECT_GT(w.num_accepted_drafts(), 0);
    EXPECT_GT(w.num_rejected_drafts(), 0);
    EXPECT_GT(failures, 0);
  }

  int completed = 0;
  int stopped_by_rule = 0;
  for (const RequestSpec& sp : specs) {
    const Request* r = s.request(sp.id);
    if (r == nullptr) continue;  // rejected at admission
    ASSERT_TRUE(r->is_finished()) << r->id;
    if (cut_short.count(sp.id) != 0) continue;
    ASSERT_NE(r->status, RequestStatus::kFinishedAborted) << r->id;
    ++completed;
    if (r->status == RequestStatus::kFinishedLength) {
      const int64_t expected_len =
          std::min<int64_t>(r->num_prompt_tokens() + sp.max_tokens, c.max_model_len);
      EXPECT_EQ(r->num_tokens(), expected_len) << r->id;
    } else {
      ++stopped_by_rule;
      EXPECT_GE(r->num_output_tokens(), sp.stop.min_tokens) << r->id;
    }
    EXPECT_EQ(r->output_token_ids, reference_outputs(sp, reference_config(c))) << r->id;
  }
  EXPECT_GT(completed, kNumRequests / 3);
  if (tc.drafts) {
    EXPECT_GT(stopped_by_rule, 0);
  }
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
TEST(SchedulerStress, DraftsStopsAndFailuresChunkedWithPrefixCaching) {
  for (const uint32_t seed : {55u, 56u, 57u}) {
    SCOPED_TRACE(seed);
    run_stress({seed, true, true, true});
  }
}
TEST(SchedulerStress, DraftsStopsAndFailuresChunkedWithoutPrefixCaching) {
  for (const uint32_t seed : {66u, 67u, 68u}) {
    SCOPED_TRACE(seed);
    run_stress({seed, true, false, true});
  }
}
TEST(SchedulerStress, DraftsStopsAndFailuresWholePromptsWithPrefixCaching) {
  for (const uint32_t seed : {77u, 78u, 79u}) {
    SCOPED_TRACE(seed);
    run_stress({seed, false, true, true});
  }
}
TEST(SchedulerStress, DraftsStopsAndFailuresWholePromptsWithoutPrefixCaching) {
  for (const uint32_t seed : {88u, 89u, 90u}) {
    SCOPED_TRACE(seed);
    run_stress({seed, false, false, true});
  }
}

}  // namespace
}  // namespace kestrel
