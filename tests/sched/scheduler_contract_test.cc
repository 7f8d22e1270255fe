// The scheduler → worker contract: each request's data reaches the worker once, then only as
// deltas; preempted requests come back as cached with a fresh table; finished ids are reported
// once; a worker's per-request failure and a failed step leave no trace in scheduler state.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

std::vector<BlockId> table_of(const Scheduler& s, RequestHandle id) {
  const std::span<const BlockId> t = s.kv().block_table(id);
  return {t.begin(), t.end()};
}

TEST(SchedulerContract, NewRequestDataOnceThenBlockDeltas) {
  Harness h(small_config());  // blocks of 4
  RequestSpec a = spec(1, make_prompt(8, 1), 12);
  a.sampling.seed = 77;
  a.sampling.params.temperature = 0.5f;
  a.sampling.min_tokens = 2;
  const RequestSampling sampling = a.sampling;
  ASSERT_TRUE(h.s.add_request(a).ok());

  StepResult r = h.step();
  ASSERT_EQ(r.out.new_requests.size(), 1u);
  EXPECT_TRUE(r.out.cached_requests.empty());
  const NewRequestData& n = r.out.new_requests[0];
  EXPECT_EQ(n.id, 1);
  EXPECT_EQ(n.prompt_token_ids, make_prompt(8, 1));
  EXPECT_EQ(n.sampling, sampling);
  EXPECT_EQ(n.num_computed_tokens, 0);
  EXPECT_EQ(n.block_ids, (GroupBlockIds{table_of(h.s, 1)}));
  EXPECT_EQ(n.block_ids[0].size(), 2u);
  std::vector<BlockId> known = n.block_ids[0];

  // Each later step: cached data with only the blocks added since (one every 4 positions).
  bool b_added = false;
  while (h.s.has_unfinished()) {
    const int64_t position = h.s.request(1)->num_computed_tokens;
    if (position == 13) {
      ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(5, 2), 2)).ok());
      b_added = true;
    }
    r = h.step();
    EXPECT_EQ(find_new(r.out, 1), nullptr);
    const CachedRequestData* c = find_cached(r.out, 1);
    if (c == nullptr) {
      EXPECT_EQ(find(r.out, 1), nullptr);
      continue;
    }
    EXPECT_FALSE(c->resumed_from_preemption);
    EXPECT_EQ(c->num_computed_tokens, position);
    ASSERT_EQ(c->new_block_ids.size(), 1u);
    EXPECT_EQ(c->new_block_ids[0].size(), position % 4 == 0 ? 1u : 0u) << "at " << position;
    known.insert(known.end(), c->new_block_ids[0].begin(), c->new_block_ids[0].end());
    if (h.s.request(1)->is_finished()) break;
    EXPECT_EQ(known, table_of(h.s, 1));
    if (position == 13) {
      ASSERT_NE(find_new(r.out, 2), nullptr);  // a newcomer beside a cached request
      EXPECT_EQ(find_cached(r.out, 2), nullptr);
      EXPECT_EQ(r.out.new_requests.size(), 1u);
    }
  }
  EXPECT_TRUE(b_added);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(1)->output_token_ids, reference_outputs(make_prompt(8, 1), 12));
}

// vLLM: a preempted request is not sent again as new; it comes back as cached data with
// resumed_from_preemption and its whole new table, computing again from its prefix hits.
void check_resume(bool prefix_caching) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;  // one full sequence
  c.enable_prefix_caching = prefix_caching;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(3, make_prompt(8, 1), 18)).ok());
  ASSERT_TRUE(h.s.add_request(spec(4, make_prompt(8, 2), 18)).ok());
  int new_sent = 0;
  int resumes = 0;
  bool preempted = false;
  for (int i = 0; i < 200 && h.s.has_unfinished(); ++i) {
    const SchedulerOutput out = h.s.schedule();
    new_sent += find_new(out, 4) != nullptr ? 1 : 0;
    if (count(out.preempted_ids, 4) != 0) {
      EXPECT_EQ(find(out, 4), nullptr);
      EXPECT_EQ(find_cached(out, 4), nullptr);
      EXPECT_EQ(h.s.request(4)->status, RequestStatus::kPreempted);
      EXPECT_TRUE(h.s.kv().block_table(4).empty());
      preempted = true;
    }
    if (const CachedRequestData* d = find_cached(out, 4)) {
      // The first appearance after a preemption, and only that one, is a resume.
      EXPECT_EQ(d->resumed_from_preemption, preempted);
      if (d->resumed_from_preemption) {
        ++resumes;
        EXPECT_EQ(d->new_block_ids, (GroupBlockIds{table_of(h.s, 4)}));
        EXPECT_EQ(d->num_computed_tokens, h.s.request(4)->num_computed_tokens);
        if (!prefix_caching) {
          EXPECT_EQ(d->num_computed_tokens, 0);
        }
        EXPECT_EQ(find(out, 4)->num_tokens,
                  std::min<int64_t>(h.s.request(4)->num_tokens() - d->num_computed_tokens,
                                    c.max_num_batched_tokens));
      }
      preempted = false;
    }
    const RunnerOutput result = h.w.execute(out);
    check_updates(out, result, h.s.update_from_output(out, result));
  }
  EXPECT_FALSE(h.s.has_unfinished());
  EXPECT_EQ(new_sent, 1);
  EXPECT_GT(resumes, 0);
  EXPECT_EQ(h.s.request(3)->output_token_ids, reference_outputs(make_prompt(8, 1), 18));
  EXPECT_EQ(h.s.request(4)->output_token_ids, reference_outputs(make_prompt(8, 2), 18));
}

TEST(SchedulerContract, PreemptedRequestResumesAsCachedWithFullTable) {
  check_resume(false);
}
TEST(SchedulerContract, PreemptedRequestResumesFromItsPrefixHits) {
  check_resume(true);
}

TEST(SchedulerContract, FinishedIdsReportedOnceInTheNextSchedule) {
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(spec(5, make_prompt(4, 1), 2)).ok());
  ASSERT_TRUE(h.s.add_request(spec(6, make_prompt(4, 2), 20)).ok());
  ASSERT_TRUE(h.s.add_request(spec(7, make_prompt(4, 3), 20)).ok());
  ASSERT_TRUE(h.s.add_request(spec(8, make_prompt(4, 4), 20)).ok());
  h.step();
  EXPECT_TRUE(h.s.request(5)->status == RequestStatus::kRunning);
  StepResult r = h.step();  // "length" makes its second output
  ASSERT_NE(find_update(r.updates, 5), nullptr);
  EXPECT_EQ(find_update(r.updates, 5)->finished, RequestStatus::kFinishedLength);
  EXPECT_TRUE(r.out.finished_ids.empty());

  h.s.abort(6);
  h.s.finish(7, RequestStatus::kFinishedStopped);
  r = h.step();
  EXPECT_EQ(r.out.finished_ids, (std::vector<RequestHandle>{5, 6, 7}));
  EXPECT_EQ(find(r.out, 6), nullptr);
  EXPECT_EQ(h.w.find(5), nullptr);  // the worker dropped them
  EXPECT_EQ(h.w.find(6), nullptr);
  EXPECT_NE(h.w.find(8), nullptr);

  h.s.abort(8);
  h.s.abort(8);  // twice: still reported once
  h.s.abort(5);  // already finished: not reported again
  r = h.step();
  EXPECT_EQ(r.out.finished_ids, (std::vector<RequestHandle>{8}));
  r = h.step();
  EXPECT_TRUE(r.out.finished_ids.empty());
  EXPECT_EQ(h.w.num_requests(), 0u);
  EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
}

TEST(SchedulerContract, RunnerFailureIsSkippedByUpdate) {
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(6, 1), 5)).ok());
  ASSERT_TRUE(h.s.add_request(spec(2, make_prompt(6, 2), 5)).ok());
  h.step();
  const std::vector<int32_t> a_outputs = h.s.request(1)->output_token_ids;
  ASSERT_EQ(a_outputs.size(), 1u);
  const int64_t a_computed = h.s.request(1)->num_computed_tokens;

  h.w.fail_next(1);
  h.s.set_draft_tokens(1, {30005, 30006});
  StepResult r = h.step();
  ASSERT_EQ(r.result.failures.size(), 1u);
  EXPECT_EQ(r.result.failures[0].id, 1);
  EXPECT_EQ(find(r.out, 1)->num_tokens, 3);
  EXPECT_EQ(find_update(r.updates, 1), nullptr);
  ASSERT_NE(find_update(r.updates, 2), nullptr);
  const Request* a = h.s.request(1);
  EXPECT_EQ(a->output_token_ids, a_outputs);  // nothing appended
  EXPECT_EQ(a->num_computed_tokens, a_computed);
  EXPECT_EQ(a->status, RequestStatus::kRunning);  // not finished by update: the engine core ends it
  EXPECT_EQ(h.s.request(2)->num_output_tokens(), 2);

  h.s.abort(1);
  r = h.step();
  EXPECT_EQ(r.out.finished_ids, (std::vector<RequestHandle>{1}));
  EXPECT_EQ(h.s.request(1)->output_token_ids, a_outputs);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(2)->output_token_ids, reference_outputs(make_prompt(6, 2), 5));
  EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
}

// A failed forward pass wrote nothing: the blocks published for it must not be hit later (the
// worker would read K/V that was never written).
TEST(SchedulerContract, FailStepWithdrawsUnwrittenBlocks) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(12, 3);
  std::vector<int32_t> longer = prompt;
  longer.push_back(5);
  ASSERT_TRUE(h.s.add_request(spec(1, prompt, 4)).ok());
  const SchedulerOutput out = h.s.schedule();  // publishes a's three full blocks
  h.s.fail_step(out);                          // ... which the worker never computes
  EXPECT_EQ(h.s.request(1)->status, RequestStatus::kFinishedAborted);
  ASSERT_TRUE(h.s.add_request(spec(2, longer, 4)).ok());
  StepResult r = h.step();
  EXPECT_EQ(r.out.finished_ids, (std::vector<RequestHandle>{1}));
  ASSERT_NE(find_new(r.out, 2), nullptr);
  EXPECT_EQ(find_new(r.out, 2)->num_computed_tokens, 0);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(2)->output_token_ids, reference_outputs(longer, 4));
}

// The same when the request was aborted after schedule() and before its step failed.
TEST(SchedulerContract, FailStepWithdrawsUnwrittenBlocksOfAbortedRequest) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(12, 4);
  std::vector<int32_t> longer = prompt;
  longer.push_back(5);
  ASSERT_TRUE(h.s.add_request(spec(1, prompt, 4)).ok());
  const SchedulerOutput out = h.s.schedule();
  h.s.abort(1);  // e.g. the client went away while the step ran
  h.s.fail_step(out);
  ASSERT_TRUE(h.s.add_request(spec(2, longer, 4)).ok());
  StepResult r = h.step();
  ASSERT_NE(find_new(r.out, 2), nullptr);
  EXPECT_EQ(find_new(r.out, 2)->num_computed_tokens, 0) << "hit blocks that were never written";
  h.run_to_completion();
  EXPECT_EQ(h.s.request(2)->output_token_ids, reference_outputs(longer, 4));
}

}  // namespace
}  // namespace kestrel
