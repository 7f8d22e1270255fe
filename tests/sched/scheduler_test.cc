#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_runner.h"

namespace kestrel {
namespace {

std::vector<int32_t> make_prompt(int n, int32_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(seed * 1000 + i * 7 + 3);
  return t;
}

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 8;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_blocks = 128;
  return c;
}

const ScheduledRequest* find(const SchedulerOutput& out, const RequestId& id) {
  for (const ScheduledRequest& r : out.scheduled) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

// Runs until nothing is left; returns the number of steps.
int run_to_completion(Scheduler& s, int max_steps = 10000) {
  int steps = 0;
  while (s.has_unfinished() && steps < max_steps) {
    fake_step(s);
    ++steps;
  }
  EXPECT_FALSE(s.has_unfinished());
  return steps;
}

// Outputs of one request run alone in a roomy scheduler.
std::vector<int32_t> reference_outputs(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  SchedulerConfig c = small_config();
  c.enable_prefix_caching = false;
  Scheduler s(c);
  EXPECT_TRUE(s.add_request("ref", prompt, max_tokens).ok());
  run_to_completion(s);
  return s.request("ref")->output_token_ids;
}

TEST(Scheduler, BudgetAndMaxNumSeqsRespected) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 3;
  Scheduler s(c);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.add_request("r" + std::to_string(i), make_prompt(5 + 3 * i, i), 4 + i).ok());
  }
  int steps = 0;
  while (s.has_unfinished() && steps < 1000) {
    const SchedulerOutput out = fake_step(s);
    int64_t sum = 0;
    for (const ScheduledRequest& r : out.scheduled) sum += r.num_new_tokens;
    EXPECT_EQ(sum, out.total_num_scheduled_tokens);
    EXPECT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(out.scheduled.size()), c.max_num_seqs);
    EXPECT_LE(static_cast<int64_t>(s.num_running()), c.max_num_seqs);
    ++steps;
  }
  ASSERT_FALSE(s.has_unfinished());
  for (int i = 0; i < 10; ++i) {
    const Request* r = s.request("r" + std::to_string(i));
    EXPECT_EQ(r->status, RequestStatus::kFinishedLength);
    EXPECT_EQ(r->num_output_tokens(), 4 + i);
    EXPECT_EQ(r->output_token_ids, reference_outputs(make_prompt(5 + 3 * i, i), 4 + i));
  }
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
}

TEST(Scheduler, ChunkedPrefillRunsBesideDecodes) {
  Scheduler s(small_config());  // budget 16
  ASSERT_TRUE(s.add_request("a", make_prompt(4, 1), 20).ok());
  SchedulerOutput out = fake_step(s);
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 4);
  EXPECT_FALSE(out.scheduled[0].is_prefill_chunk);

  ASSERT_TRUE(s.add_request("b", make_prompt(40, 2), 5).ok());
  // "a" decodes one token per step; "b" fills the rest of the budget: 15 + 15 + 10 = 40.
  const int64_t chunks[] = {15, 15, 10};
  for (int step = 0; step < 3; ++step) {
    out = fake_step(s);
    const ScheduledRequest* a = find(out, "a");
    const ScheduledRequest* b = find(out, "b");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->num_new_tokens, 1);
    EXPECT_EQ(b->num_new_tokens, chunks[step]);
    EXPECT_EQ(b->start_position, 15 * step);
    EXPECT_EQ(b->is_prefill_chunk, step < 2);
    EXPECT_EQ(s.request("b")->num_output_tokens(), step < 2 ? 0 : 1);
  }
  out = fake_step(s);
  EXPECT_EQ(find(out, "b")->num_new_tokens, 1);
  run_to_completion(s);
  EXPECT_EQ(s.request("b")->output_token_ids, reference_outputs(make_prompt(40, 2), 5));
}

TEST(Scheduler, WithoutChunkedPrefillLongPromptWaits) {
  SchedulerConfig c = small_config();
  c.enable_chunked_prefill = false;
  c.max_model_len = 16;
  c.max_num_batched_tokens = 16;
  Scheduler s(c);
  ASSERT_TRUE(s.add_request("a", make_prompt(4, 1), 3).ok());
  ASSERT_TRUE(s.add_request("b", make_prompt(4, 2), 3).ok());
  EXPECT_EQ(fake_step(s).total_num_scheduled_tokens, 8);
  ASSERT_TRUE(s.add_request("c", make_prompt(15, 3), 1).ok());
  // Two decodes leave 14 tokens; "c" needs 15 and must not be split.
  SchedulerOutput out = fake_step(s);
  EXPECT_EQ(find(out, "c"), nullptr);
  EXPECT_EQ(out.total_num_scheduled_tokens, 2);
  EXPECT_EQ(s.request("c")->status, RequestStatus::kWaiting);
  fake_step(s);  // last decodes: "a" and "b" finish
  out = fake_step(s);
  ASSERT_NE(find(out, "c"), nullptr);
  EXPECT_EQ(find(out, "c")->num_new_tokens, 15);
  EXPECT_EQ(s.request("c")->status, RequestStatus::kFinishedLength);

  // The same arrival with chunking on starts at once with the 14 tokens left.
  c.enable_chunked_prefill = true;
  Scheduler chunked(c);
  ASSERT_TRUE(chunked.add_request("a", make_prompt(4, 1), 3).ok());
  ASSERT_TRUE(chunked.add_request("b", make_prompt(4, 2), 3).ok());
  fake_step(chunked);
  ASSERT_TRUE(chunked.add_request("c", make_prompt(15, 3), 1).ok());
  out = fake_step(chunked);
  ASSERT_NE(find(out, "c"), nullptr);
  EXPECT_EQ(find(out, "c")->num_new_tokens, 14);
  EXPECT_TRUE(find(out, "c")->is_prefill_chunk);
}

TEST(Scheduler, PrefixCacheHitSchedulesFewerTokens) {
  Scheduler s(small_config());
  const std::vector<int32_t> first = make_prompt(20, 5);
  std::vector<int32_t> second(first.begin(), first.begin() + 16);
  for (int i = 0; i < 6; ++i) second.push_back(900 + i);
  ASSERT_TRUE(s.add_request("a", first, 3).ok());
  run_to_completion(s);
  EXPECT_EQ(s.request("a")->num_cached_tokens, 0);

  ASSERT_TRUE(s.add_request("b", second, 3).ok());
  const SchedulerOutput out = fake_step(s);
  const ScheduledRequest* b = find(out, "b");
  ASSERT_NE(b, nullptr);
  // Block size 4: the 16 shared tokens are four full cached blocks.
  EXPECT_EQ(b->num_cached_tokens, 16);
  EXPECT_EQ(b->start_position, 16);
  EXPECT_EQ(b->num_new_tokens, 6);
  EXPECT_EQ(s.request("b")->num_cached_tokens, 16);
  EXPECT_GE(s.kv().prefix_cache_hits(), 16);
  run_to_completion(s);
  EXPECT_EQ(s.request("b")->output_token_ids, reference_outputs(second, 3));
}

// cache_salt: requests share cached blocks only when their cache keys are equal.
TEST(Scheduler, CacheKeysIsolatePrefixHits) {
  Scheduler s(small_config());
  const std::vector<int32_t> prompt = make_prompt(20, 6);
  ASSERT_TRUE(s.add_request("salted", prompt, 2, true, {42}).ok());
  run_to_completion(s);
  // The budget (16 tokens) admits one request per step: each is looked up on its own.
  auto cached_at_admission = [&](const RequestId& id, std::vector<uint64_t> keys) {
    EXPECT_TRUE(s.add_request(id, prompt, 2, true, std::move(keys)).ok());
    const SchedulerOutput out = fake_step(s);
    const ScheduledRequest* r = find(out, id);
    EXPECT_NE(r, nullptr);
    const int64_t cached = r != nullptr ? r->num_cached_tokens : -1;
    run_to_completion(s);
    return cached;
  };
  EXPECT_EQ(cached_at_admission("plain", {}), 0);
  EXPECT_EQ(cached_at_admission("other_salt", {43}), 0);
  EXPECT_EQ(cached_at_admission("same_salt", {42}), 16);
  EXPECT_EQ(cached_at_admission("plain_again", {}), 16);  // "plain" cached its own blocks
}

TEST(Scheduler, PreemptsNewestAndResumesWithSameOutputs) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;  // 8 usable blocks of 4 = 32 tokens: one full sequence
  c.enable_prefix_caching = false;
  Scheduler s(c);
  ASSERT_TRUE(s.add_request("old", make_prompt(8, 1), 18).ok());
  ASSERT_TRUE(s.add_request("new", make_prompt(8, 2), 18).ok());
  bool preempted_new = false;
  int steps = 0;
  int64_t preemptions = 0;
  while (s.has_unfinished() && steps < 1000) {
    const SchedulerOutput out = fake_step(s);
    preemptions += static_cast<int64_t>(out.preempted_ids.size());
    EXPECT_EQ(s.num_preemptions(), preemptions);
    for (const RequestId& id : out.preempted_ids) {
      EXPECT_EQ(id, "new");
      preempted_new = true;
    }
    EXPECT_TRUE(s.kv().pool().check_invariants().empty());
    ++steps;
  }
  EXPECT_TRUE(preempted_new);
  EXPECT_EQ(s.request("old")->output_token_ids, reference_outputs(make_prompt(8, 1), 18));
  EXPECT_EQ(s.request("new")->output_token_ids, reference_outputs(make_prompt(8, 2), 18));
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
}

TEST(Scheduler, PreemptedRequestGoesToFrontAndRestartsFromZero) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 2;  // keeps "late" queued behind the preempted request
  Scheduler limited(c);
  ASSERT_TRUE(limited.add_request("old", make_prompt(8, 1), 18).ok());
  ASSERT_TRUE(limited.add_request("new", make_prompt(8, 2), 18).ok());
  ASSERT_TRUE(limited.add_request("late", make_prompt(4, 3), 2).ok());
  for (int steps = 0; steps < 100; ++steps) {
    const SchedulerOutput out = fake_step(limited);
    if (out.preempted_ids.empty()) continue;
    const Request* r = limited.request("new");
    EXPECT_EQ(r->status, RequestStatus::kPreempted);
    EXPECT_EQ(r->num_computed_tokens, 0);
    EXPECT_GT(r->num_output_tokens(), 0);
    ASSERT_FALSE(limited.waiting().empty());
    EXPECT_EQ(limited.waiting().front()->id, "new");
    EXPECT_TRUE(limited.kv().block_table("new").empty());
    return;
  }
  ADD_FAILURE() << "no preemption happened";
}

TEST(Scheduler, AbortInEveryStateFreesBlocks) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 2;
  Scheduler s(c);
  ASSERT_TRUE(s.add_request("old", make_prompt(8, 1), 18).ok());
  ASSERT_TRUE(s.add_request("new", make_prompt(8, 2), 18).ok());
  ASSERT_TRUE(s.add_request("queued", make_prompt(4, 3), 2).ok());

  // Waiting: nothing held, just dequeued.
  s.abort("queued");
  EXPECT_EQ(s.request("queued")->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.num_waiting(), 2u);

  // Run until "new" is preempted, then abort it there.
  const SchedulerOutput first = fake_step(s);
  EXPECT_EQ(first.finished_ids, (std::vector<RequestId>{"queued"}));
  bool preempted = !first.preempted_ids.empty();
  for (int i = 0; i < 100 && !preempted; ++i) preempted = !fake_step(s).preempted_ids.empty();
  ASSERT_TRUE(preempted);
  ASSERT_EQ(s.request("new")->status, RequestStatus::kPreempted);
  s.abort("new");
  EXPECT_EQ(s.request("new")->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.num_waiting(), 0u);

  // Running: its blocks come back at once.
  ASSERT_EQ(s.request("old")->status, RequestStatus::kRunning);
  EXPECT_LT(s.kv().pool().num_free(), c.num_blocks - 1);
  s.abort("old");
  EXPECT_EQ(s.request("old")->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
  EXPECT_TRUE(s.kv().pool().check_invariants().empty());
  EXPECT_FALSE(s.has_unfinished());
  const SchedulerOutput out = s.schedule();
  EXPECT_TRUE(out.scheduled.empty());
  EXPECT_EQ(out.finished_ids, (std::vector<RequestId>{"new", "old"}));

  // Finished: a no-op.
  Scheduler t(small_config());
  ASSERT_TRUE(t.add_request("done", make_prompt(4, 4), 2).ok());
  run_to_completion(t);
  const std::vector<int32_t> outputs = t.request("done")->output_token_ids;
  t.abort("done");
  EXPECT_EQ(t.request("done")->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(t.request("done")->output_token_ids, outputs);
  t.abort("unknown");
  EXPECT_EQ(t.kv().pool().num_free(), small_config().num_blocks - 1);
}

TEST(Scheduler, AbortBetweenScheduleAndUpdateIsSkipped) {
  Scheduler s(small_config());
  ASSERT_TRUE(s.add_request("a", make_prompt(6, 1), 5).ok());
  ASSERT_TRUE(s.add_request("b", make_prompt(6, 2), 5).ok());
  const SchedulerOutput out = s.schedule();
  const auto sampled = fake_run(s, out);
  s.abort("a");
  EXPECT_TRUE(s.update_from_output(out, sampled).empty());
  EXPECT_EQ(s.request("a")->num_output_tokens(), 0);
  EXPECT_EQ(s.request("b")->num_output_tokens(), 1);
}

TEST(Scheduler, EngineStopFinishesRequest) {
  Scheduler s(small_config());
  ASSERT_TRUE(s.add_request("a", make_prompt(6, 1), 50).ok());
  fake_step(s);
  fake_step(s);
  s.finish("a", RequestStatus::kFinishedStopped);
  EXPECT_EQ(s.request("a")->status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(s.request("a")->num_output_tokens(), 2);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.kv().pool().num_free(), small_config().num_blocks - 1);
  s.release("a");
  EXPECT_EQ(s.request("a"), nullptr);
}

TEST(Scheduler, MaxModelLenRejectsAndCapsLength) {
  SchedulerConfig c = small_config();
  c.max_model_len = 20;
  Scheduler s(c);
  const Status too_long = s.add_request("x", make_prompt(20, 1), 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("max_model_len"), std::string::npos);
  EXPECT_EQ(s.request("x"), nullptr);
  EXPECT_FALSE(s.add_request("e", {}, 4).ok());
  EXPECT_FALSE(s.add_request("z", make_prompt(3, 1), 0).ok());
  ASSERT_TRUE(s.add_request("y", make_prompt(19, 1), 1).ok());
  EXPECT_FALSE(s.add_request("y", make_prompt(3, 1), 1).ok());
  // Asks for far more outputs than fit: stops at max_model_len tokens in all.
  ASSERT_TRUE(s.add_request("w", make_prompt(12, 2), 100).ok());
  run_to_completion(s);
  EXPECT_EQ(s.request("y")->num_tokens(), 20);
  EXPECT_EQ(s.request("w")->num_tokens(), 20);
  EXPECT_EQ(s.request("w")->status, RequestStatus::kFinishedLength);
}

TEST(Scheduler, ValidateRejectsUnworkableConfigs) {
  EXPECT_TRUE(validate(small_config()).ok());
  SchedulerConfig c = small_config();
  c.enable_chunked_prefill = false;  // budget 16 < max_model_len 64
  EXPECT_FALSE(validate(c).ok());
  c = small_config();
  c.num_blocks = 10;  // 9 blocks of 4 < 64 tokens
  EXPECT_FALSE(validate(c).ok());
  c = small_config();
  c.max_num_seqs = 0;
  EXPECT_FALSE(validate(c).ok());
}

}  // namespace
}  // namespace kestrel
