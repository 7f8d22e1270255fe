#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

TEST(Scheduler, BudgetAndMaxNumSeqsRespected) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 3;
  Harness h(c);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        h.s.add_request(spec(RequestHandle(1000 + i), make_prompt(5 + 3 * i, i), 4 + i)).ok());
  }
  int steps = 0;
  while (h.s.has_unfinished() && steps < 1000) {
    const SchedulerOutput out = h.step().out;
    int64_t sum = 0;
    for (const ScheduledTokens& r : out.scheduled) sum += r.num_tokens;
    EXPECT_EQ(sum, out.total_num_scheduled_tokens);
    EXPECT_LE(out.total_num_scheduled_tokens, c.max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(out.scheduled.size()), c.max_num_seqs);
    EXPECT_LE(static_cast<int64_t>(h.s.num_running()), c.max_num_seqs);
    ++steps;
  }
  ASSERT_FALSE(h.s.has_unfinished());
  for (int i = 0; i < 10; ++i) {
    const Request* r = h.s.request(RequestHandle(1000 + i));
    EXPECT_EQ(r->status, RequestStatus::kFinishedLength);
    EXPECT_EQ(r->num_output_tokens(), 4 + i);
    EXPECT_EQ(r->output_token_ids, reference_outputs(make_prompt(5 + 3 * i, i), 4 + i));
  }
  EXPECT_EQ(h.s.kv().pool().num_free(), c.num_blocks - 1);
}

TEST(Scheduler, ChunkedPrefillRunsBesideDecodes) {
  Harness h(small_config());  // budget 16
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(4, 1), 20)).ok());
  StepResult r = h.step();
  ASSERT_EQ(r.out.scheduled.size(), 1u);
  EXPECT_EQ(r.out.scheduled[0].num_tokens, 4);
  EXPECT_TRUE(sampled(r.result, 2));  // not a prefill chunk

  ASSERT_TRUE(h.s.add_request(spec(3, make_prompt(40, 2), 5)).ok());
  // "a" decodes one token per step; "b" fills the rest of the budget: 15 + 15 + 10 = 40.
  const int64_t chunks[] = {15, 15, 10};
  for (int step = 0; step < 3; ++step) {
    r = h.step();
    const ScheduledTokens* a = find(r.out, 2);
    const ScheduledTokens* b = find(r.out, 3);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->num_tokens, 1);
    EXPECT_EQ(b->num_tokens, chunks[step]);
    EXPECT_EQ(start_of(r.out, 3), 15 * step);
    EXPECT_EQ(sampled(r.result, 3), step == 2);  // the first two are prefill chunks
    EXPECT_EQ(find_update(r.updates, 3) != nullptr, step == 2);
    EXPECT_EQ(h.s.request(3)->num_output_tokens(), step < 2 ? 0 : 1);
  }
  r = h.step();
  EXPECT_EQ(find(r.out, 3)->num_tokens, 1);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(3)->output_token_ids, reference_outputs(make_prompt(40, 2), 5));
}

TEST(Scheduler, WithoutChunkedPrefillLongPromptWaits) {
  SchedulerConfig c = small_config();
  c.enable_chunked_prefill = false;
  c.max_model_len = 16;
  c.max_num_batched_tokens = 16;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(4, 1), 3)).ok());
  ASSERT_TRUE(h.s.add_request(spec(3, make_prompt(4, 2), 3)).ok());
  EXPECT_EQ(h.step().out.total_num_scheduled_tokens, 8);
  ASSERT_TRUE(h.s.add_request(spec(4, make_prompt(15, 3), 1)).ok());
  // Two decodes leave 14 tokens; "c" needs 15 and must not be split.
  StepResult r = h.step();
  EXPECT_EQ(find(r.out, 4), nullptr);
  EXPECT_EQ(r.out.total_num_scheduled_tokens, 2);
  EXPECT_EQ(h.s.request(4)->status, RequestStatus::kWaiting);
  h.step();  // last decodes: "a" and "b" finish
  r = h.step();
  ASSERT_NE(find(r.out, 4), nullptr);
  EXPECT_EQ(find(r.out, 4)->num_tokens, 15);
  EXPECT_EQ(h.s.request(4)->status, RequestStatus::kFinishedLength);

  // The same arrival with chunking on starts at once with the 14 tokens left.
  c.enable_chunked_prefill = true;
  Harness chunked(c);
  ASSERT_TRUE(chunked.s.add_request(spec(2, make_prompt(4, 1), 3)).ok());
  ASSERT_TRUE(chunked.s.add_request(spec(3, make_prompt(4, 2), 3)).ok());
  chunked.step();
  ASSERT_TRUE(chunked.s.add_request(spec(4, make_prompt(15, 3), 1)).ok());
  r = chunked.step();
  ASSERT_NE(find(r.out, 4), nullptr);
  EXPECT_EQ(find(r.out, 4)->num_tokens, 14);
  EXPECT_FALSE(sampled(r.result, 4));  // a prefill chunk
  EXPECT_EQ(chunked.s.request(4)->num_output_tokens(), 0);
}

TEST(Scheduler, PrefixCacheHitSchedulesFewerTokens) {
  Harness h(small_config());
  const std::vector<int32_t> first = make_prompt(20, 5);
  std::vector<int32_t> second(first.begin(), first.begin() + 16);
  for (int i = 0; i < 6; ++i) second.push_back(900 + i);
  ASSERT_TRUE(h.s.add_request(spec(2, first, 3)).ok());
  h.run_to_completion();
  EXPECT_EQ(h.s.request(2)->num_cached_tokens, 0);

  ASSERT_TRUE(h.s.add_request(spec(3, second, 3)).ok());
  const SchedulerOutput out = h.step().out;
  const ScheduledTokens* b = find(out, 3);
  ASSERT_NE(b, nullptr);
  const NewRequestData* nb = find_new(out, 3);
  ASSERT_NE(nb, nullptr);
  // Block size 4: the 16 shared tokens are four full cached blocks.
  EXPECT_EQ(nb->num_computed_tokens, 16);
  EXPECT_EQ(nb->prompt_token_ids, second);
  EXPECT_EQ(b->num_tokens, 6);
  EXPECT_EQ(h.s.request(3)->num_cached_tokens, 16);
  EXPECT_GE(h.s.kv().prefix_cache_hits(), 16);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(3)->output_token_ids, reference_outputs(second, 3));
}

// cache_salt: requests share cached blocks only when their cache keys are equal.
TEST(Scheduler, CacheKeysIsolatePrefixHits) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(20, 6);
  ASSERT_TRUE(h.s.add_request(spec(5, prompt, 2, true, {42})).ok());
  h.run_to_completion();
  // The budget (16 tokens) admits one request per step: each is looked up on its own.
  auto cached_at_admission = [&](RequestHandle id, std::vector<uint64_t> keys) {
    EXPECT_TRUE(h.s.add_request(spec(id, prompt, 2, true, std::move(keys))).ok());
    const SchedulerOutput out = h.step().out;
    const NewRequestData* r = find_new(out, id);
    EXPECT_NE(r, nullptr);
    const int64_t cached = r != nullptr ? r->num_computed_tokens : -1;
    EXPECT_EQ(h.s.request(id)->num_cached_tokens, cached);
    h.run_to_completion();
    return cached;
  };
  EXPECT_EQ(cached_at_admission(6, {}), 0);
  EXPECT_EQ(cached_at_admission(7, {43}), 0);
  EXPECT_EQ(cached_at_admission(8, {42}), 16);
  EXPECT_EQ(cached_at_admission(9, {}), 16);  // 6 cached its own blocks
}

// read_prefix_cache = false (prompt logprobs): computed from 0, but its blocks are still offered.
TEST(Scheduler, NoPrefixCacheReadStillPublishes) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(20, 7);
  auto computed_at_admission = [&](RequestHandle id, bool read) {
    EXPECT_TRUE(h.s.add_request(spec(id, prompt, 2, read)).ok());
    const StepResult r = h.step();
    const NewRequestData* n = find_new(r.out, id);
    EXPECT_NE(n, nullptr);
    const int64_t computed = n != nullptr ? n->num_computed_tokens : -1;
    EXPECT_EQ(find(r.out, id)->num_tokens, std::min<int64_t>(20 - computed, 16));  // budget 16
    h.run_to_completion();
    EXPECT_EQ(h.s.request(id)->output_token_ids, reference_outputs(prompt, 2));
    return computed;
  };
  EXPECT_EQ(computed_at_admission(10, false), 0);
  EXPECT_EQ(computed_at_admission(11, true), 16);  // hits what 10 published
  EXPECT_EQ(computed_at_admission(12, false), 0);
}

TEST(Scheduler, PreemptsNewestAndResumesWithSameOutputs) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;  // 8 usable blocks of 4 = 32 tokens: one full sequence
  c.enable_prefix_caching = false;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(13, make_prompt(8, 1), 18)).ok());
  ASSERT_TRUE(h.s.add_request(spec(14, make_prompt(8, 2), 18)).ok());
  bool preempted_new = false;
  int steps = 0;
  int64_t preemptions = 0;
  while (h.s.has_unfinished() && steps < 1000) {
    const SchedulerOutput out = h.step().out;
    preemptions += static_cast<int64_t>(out.preempted_ids.size());
    EXPECT_EQ(h.s.num_preemptions(), preemptions);
    for (RequestHandle id : out.preempted_ids) {
      EXPECT_EQ(id, 14);
      preempted_new = true;
    }
    EXPECT_TRUE(h.s.kv().pool().check_invariants().empty());
    ++steps;
  }
  EXPECT_TRUE(preempted_new);
  EXPECT_EQ(h.s.request(13)->output_token_ids, reference_outputs(make_prompt(8, 1), 18));
  EXPECT_EQ(h.s.request(14)->output_token_ids, reference_outputs(make_prompt(8, 2), 18));
  EXPECT_EQ(h.s.kv().pool().num_free(), c.num_blocks - 1);
}

TEST(Scheduler, PreemptedRequestGoesToFrontAndRestartsFromZero) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 2;  // keeps "late" queued behind the preempted request
  Harness limited(c);
  ASSERT_TRUE(limited.s.add_request(spec(13, make_prompt(8, 1), 18)).ok());
  ASSERT_TRUE(limited.s.add_request(spec(14, make_prompt(8, 2), 18)).ok());
  ASSERT_TRUE(limited.s.add_request(spec(15, make_prompt(4, 3), 2)).ok());
  for (int steps = 0; steps < 100; ++steps) {
    const SchedulerOutput out = limited.step().out;
    if (out.preempted_ids.empty()) continue;
    const Request* r = limited.s.request(14);
    EXPECT_EQ(r->status, RequestStatus::kPreempted);
    EXPECT_EQ(r->num_computed_tokens, 0);
    EXPECT_GT(r->num_output_tokens(), 0);
    ASSERT_FALSE(limited.s.waiting().empty());
    EXPECT_EQ(limited.s.waiting().front()->id, 14);
    EXPECT_TRUE(limited.s.kv().block_table(14).empty());
    return;
  }
  ADD_FAILURE() << "no preemption happened";
}

// A PD decode instance's recompute scheduler: the request that would be preempted ends instead
// (given back, its blocks freed, the worker told with the next step); the other runs on.
TEST(Scheduler, GivesBackInsteadOfPreempting) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  c.enable_prefix_caching = false;
  c.give_back_preempted = true;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(13, make_prompt(8, 1), 18)).ok());
  ASSERT_TRUE(h.s.add_request(spec(14, make_prompt(8, 2), 18)).ok());
  std::vector<RequestHandle> given_back;
  bool told = false;
  for (int steps = 0; steps < 200 && h.s.has_unfinished(); ++steps) {
    const SchedulerOutput out = h.step().out;
    EXPECT_TRUE(out.preempted_ids.empty());
    for (RequestHandle id : out.finished_ids) told = told || id == 14;
    for (RequestHandle id : h.s.take_given_back()) {
      given_back.push_back(id);
      EXPECT_EQ(h.s.request(id)->status, RequestStatus::kFinishedStopped);
      EXPECT_TRUE(h.s.kv().block_table(id).empty());
      EXPECT_GT(h.s.request(id)->num_output_tokens(), 0);
    }
    EXPECT_TRUE(h.s.kv().pool().check_invariants().empty());
  }
  EXPECT_EQ(given_back, std::vector<RequestHandle>{14});
  EXPECT_TRUE(told);
  EXPECT_EQ(h.s.num_preemptions(), 1);
  EXPECT_EQ(h.s.request(13)->output_token_ids, reference_outputs(make_prompt(8, 1), 18));
  EXPECT_EQ(h.s.kv().pool().num_free(), c.num_blocks - 1);
}

TEST(Scheduler, AbortInEveryStateFreesBlocks) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 2;
  Harness h(c);
  Scheduler& s = h.s;
  ASSERT_TRUE(s.add_request(spec(13, make_prompt(8, 1), 18)).ok());
  ASSERT_TRUE(s.add_request(spec(14, make_prompt(8, 2), 18)).ok());
  ASSERT_TRUE(s.add_request(spec(16, make_prompt(4, 3), 2)).ok());

  // Waiting: nothing held, just dequeued.
  s.abort(16);
  EXPECT_EQ(s.request(16)->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.num_waiting(), 2u);

  // Run until "new" is preempted, then abort it there.
  const SchedulerOutput first = h.step().out;
  EXPECT_EQ(first.finished_ids, (std::vector<RequestHandle>{16}));
  bool preempted = !first.preempted_ids.empty();
  for (int i = 0; i < 100 && !preempted; ++i) preempted = !h.step().out.preempted_ids.empty();
  ASSERT_TRUE(preempted);
  ASSERT_EQ(s.request(14)->status, RequestStatus::kPreempted);
  s.abort(14);
  EXPECT_EQ(s.request(14)->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.num_waiting(), 0u);

  // Running: its blocks come back at once.
  ASSERT_EQ(s.request(13)->status, RequestStatus::kRunning);
  EXPECT_LT(s.kv().pool().num_free(), c.num_blocks - 1);
  s.abort(13);
  EXPECT_EQ(s.request(13)->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(s.kv().pool().num_free(), c.num_blocks - 1);
  EXPECT_TRUE(s.kv().pool().check_invariants().empty());
  EXPECT_FALSE(s.has_unfinished());
  const SchedulerOutput out = s.schedule();
  EXPECT_TRUE(out.scheduled.empty());
  EXPECT_EQ(out.finished_ids, (std::vector<RequestHandle>{14, 13}));
  h.w.execute(out);  // the worker drops both
  EXPECT_EQ(h.w.num_requests(), 0u);

  // Finished: a no-op.
  Harness t(small_config());
  ASSERT_TRUE(t.s.add_request(spec(17, make_prompt(4, 4), 2)).ok());
  t.run_to_completion();
  const std::vector<int32_t> outputs = t.s.request(17)->output_token_ids;
  t.s.abort(17);
  EXPECT_EQ(t.s.request(17)->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(t.s.request(17)->output_token_ids, outputs);
  t.s.abort(18);
  EXPECT_EQ(t.s.kv().pool().num_free(), small_config().num_blocks - 1);
  EXPECT_EQ(count(t.s.schedule().finished_ids, 17), 1);  // once, not again for the abort
}

TEST(Scheduler, AbortBetweenScheduleAndUpdateIsSkipped) {
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(6, 1), 5)).ok());
  ASSERT_TRUE(h.s.add_request(spec(3, make_prompt(6, 2), 5)).ok());
  const SchedulerOutput out = h.s.schedule();
  const RunnerOutput result = h.w.execute(out);
  ASSERT_EQ(result.sampled.size(), 2u);
  h.s.abort(2);
  const std::vector<RequestUpdate> updates = h.s.update_from_output(out, result);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].id, 3);
  EXPECT_FALSE(updates[0].finished.has_value());
  EXPECT_EQ(h.s.request(2)->num_output_tokens(), 0);
  EXPECT_EQ(h.s.request(2)->status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(h.s.request(3)->num_output_tokens(), 1);
  // The worker hears of it next step and "b" carries on from where the worker expects.
  const StepResult next = h.step();
  EXPECT_EQ(next.out.finished_ids, (std::vector<RequestHandle>{2}));
  EXPECT_EQ(h.w.find(2), nullptr);
  EXPECT_EQ(h.s.request(3)->num_output_tokens(), 2);
}

TEST(Scheduler, EngineStopFinishesRequest) {
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(6, 1), 50)).ok());
  h.step();
  h.step();
  h.s.finish(2, RequestStatus::kFinishedStopped);
  EXPECT_EQ(h.s.request(2)->status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(h.s.request(2)->num_output_tokens(), 2);
  EXPECT_FALSE(h.s.request(2)->stop_token_id.has_value());
  EXPECT_FALSE(h.s.has_unfinished());
  EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
  h.s.release(2);
  EXPECT_EQ(h.s.request(2), nullptr);
}

TEST(Scheduler, MaxModelLenRejectsAndCapsLength) {
  SchedulerConfig c = small_config();
  c.max_model_len = 20;
  Harness h(c);
  Scheduler& s = h.s;
  const Status too_long = s.add_request(spec(19, make_prompt(20, 1), 1));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("max_model_len"), std::string::npos);
  EXPECT_EQ(s.request(19), nullptr);
  EXPECT_FALSE(s.add_request(spec(20, {}, 4)).ok());
  EXPECT_FALSE(s.add_request(spec(21, make_prompt(3, 1), 0)).ok());
  ASSERT_TRUE(s.add_request(spec(22, make_prompt(19, 1), 1)).ok());
  EXPECT_FALSE(s.add_request(spec(22, make_prompt(3, 1), 1)).ok());
  // Asks for far more outputs than fit: stops at max_model_len tokens in all.
  ASSERT_TRUE(s.add_request(spec(23, make_prompt(12, 2), 100)).ok());
  h.run_to_completion();
  EXPECT_EQ(s.request(22)->num_tokens(), 20);
  EXPECT_EQ(s.request(23)->num_tokens(), 20);
  EXPECT_EQ(s.request(23)->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(s.request(23)->num_output_tokens(), 8);
}

// A request carries the chained hashes of its full blocks, made once for the prompt and extended
// as outputs fill blocks (the prefix lookup of a waiting request reads them, hashing nothing);
// they are the cache's own chain, extra keys included.
TEST(Scheduler, RequestsCarryTheirBlockHashes) {
  const std::vector<uint64_t> keys = {7};
  auto chain = [&](const Request& r) {
    std::vector<BlockHash> h;
    extend_block_hashes(r.all_token_ids, 4, keys, &h);
    return h;
  };
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(10, 3), 9, true, keys)).ok());
  const Request& a = *h.s.request(2);
  EXPECT_EQ(a.block_hashes.size(), 2u);
  EXPECT_EQ(a.block_hashes, chain(a));
  while (h.s.has_unfinished()) {
    h.step();
    EXPECT_EQ(a.block_hashes, chain(a)) << a.num_tokens() << " tokens";
  }
  EXPECT_EQ(a.num_tokens(), 19);
  EXPECT_EQ(a.block_hashes.size(), 4u);

  SchedulerConfig off = small_config();
  off.enable_prefix_caching = false;
  Harness h2(off);
  ASSERT_TRUE(h2.s.add_request(spec(3, make_prompt(10, 3), 2)).ok());
  EXPECT_TRUE(h2.s.request(3)->block_hashes.empty());
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
