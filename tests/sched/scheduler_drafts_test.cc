// Multi-token steps: speculative draft tokens ride on the step that reaches a request's last
// token, are verified by the worker, and the rejected ones are rolled back.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

constexpr int32_t kWrong = 30005;  // never sampled by the fake worker (its tokens are <= 30000)

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t n) {
  return {v.begin() + from, v.begin() + from + n};
}

// "a" (prompt of 6, 30 outputs) after its prefill: one output, 7 tokens, 6 computed.
struct Decoding {
  Decoding() : h(small_config()), ref(reference_outputs(make_prompt(6, 1), 30)) {
    EXPECT_TRUE(h.s.add_request(spec(1, make_prompt(6, 1), 30)).ok());
    h.step();
    EXPECT_EQ(h.s.request(1)->output_token_ids, slice(ref, 0, 1));
  }
  const Request& a() const { return *h.s.request(1); }
  Harness h;
  std::vector<int32_t> ref;
};

TEST(SchedulerDrafts, AllAcceptedAppendsDraftsPlusOne) {
  Decoding d;
  const std::vector<int32_t> drafts = slice(d.ref, 1, 3);
  d.h.s.set_draft_tokens(1, drafts);
  const StepResult r = d.h.step();
  const ScheduledTokens* w = find(r.out, 1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->num_tokens, 1 + 3);
  EXPECT_EQ(w->draft_token_ids, drafts);
  EXPECT_EQ(r.out.total_num_scheduled_tokens, 4);
  const RequestUpdate* u = find_update(r.updates, 1);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->new_token_ids, slice(d.ref, 1, 4));
  EXPECT_EQ(u->num_rejected_drafts, 0u);
  EXPECT_FALSE(u->finished.has_value());
  EXPECT_EQ(d.a().num_tokens(), 11);
  EXPECT_EQ(d.a().num_computed_tokens, d.a().num_tokens() - 1);
  EXPECT_EQ(d.h.s.kv().num_slots(1), d.a().num_computed_tokens);
  EXPECT_TRUE(d.a().draft_token_ids.empty());
  EXPECT_EQ(d.h.w.num_accepted_drafts(), 3);

  // Drafts are used once: the next step decodes one token from position 10.
  const StepResult next = d.h.step();
  EXPECT_EQ(find(next.out, 1)->num_tokens, 1);
  EXPECT_TRUE(find(next.out, 1)->draft_token_ids.empty());
  EXPECT_EQ(start_of(next.out, 1), 10);
  d.h.run_to_completion();
  EXPECT_EQ(d.a().output_token_ids, d.ref);
}

TEST(SchedulerDrafts, PartialRejectionRollsBackComputedTokens) {
  Decoding d;
  // The second draft is wrong: the first is accepted, the worker's own token replaces the second.
  d.h.s.set_draft_tokens(1, {d.ref[1], kWrong, d.ref[3]});
  StepResult r = d.h.step();
  EXPECT_EQ(find(r.out, 1)->num_tokens, 4);
  const RequestUpdate* u = find_update(r.updates, 1);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->new_token_ids, slice(d.ref, 1, 2));
  EXPECT_EQ(u->num_rejected_drafts, 2u);
  EXPECT_EQ(d.a().num_tokens(), 9);
  EXPECT_EQ(d.a().num_computed_tokens, 8);  // positions 8 and 9 held rejected drafts
  EXPECT_EQ(d.h.s.kv().num_slots(1), 8);

  // All rejected: one token (the worker's) and every draft rolled back.
  d.h.s.set_draft_tokens(1, {kWrong, kWrong + 1, kWrong + 2, kWrong + 3});
  r = d.h.step();
  EXPECT_EQ(start_of(r.out, 1), 8);
  EXPECT_EQ(find(r.out, 1)->num_tokens, 5);
  u = find_update(r.updates, 1);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->new_token_ids, slice(d.ref, 3, 1));
  EXPECT_EQ(u->num_rejected_drafts, 4u);
  EXPECT_EQ(d.a().num_computed_tokens, 9);

  // The next step recomputes from the first rejected position (the worker checks it).
  r = d.h.step();
  EXPECT_EQ(start_of(r.out, 1), 9);
  EXPECT_EQ(find(r.out, 1)->num_tokens, 1);
  EXPECT_EQ(d.h.w.num_rejected_drafts(), 6);
  d.h.run_to_completion();
  EXPECT_EQ(d.a().output_token_ids, d.ref);
}

TEST(SchedulerDrafts, ReplacedDraftsAndNoOps) {
  Decoding d;
  d.h.s.set_draft_tokens(1, {kWrong});
  d.h.s.set_draft_tokens(1, slice(d.ref, 1, 2));  // replaces
  d.h.s.set_draft_tokens(2, {1, 2});
  const StepResult r = d.h.step();
  EXPECT_EQ(find(r.out, 1)->draft_token_ids, slice(d.ref, 1, 2));
  d.h.s.finish(1, RequestStatus::kFinishedStopped);
  d.h.s.set_draft_tokens(1, {1, 2});  // finished: ignored
  EXPECT_TRUE(d.a().draft_token_ids.empty());
  EXPECT_TRUE(d.h.step().out.scheduled.empty());
}

TEST(SchedulerDrafts, CappedByTheTokenBudget) {
  Decoding d;  // budget 16
  d.h.s.set_draft_tokens(1, slice(d.ref, 1, 20));
  const StepResult r = d.h.step();
  EXPECT_EQ(find(r.out, 1)->num_tokens, 16);
  EXPECT_EQ(find(r.out, 1)->draft_token_ids, slice(d.ref, 1, 15));
  EXPECT_EQ(r.out.total_num_scheduled_tokens, 16);
  EXPECT_EQ(find_update(r.updates, 1)->new_token_ids, slice(d.ref, 1, 16));
  EXPECT_EQ(d.a().num_computed_tokens, 22);

  // Beside another request's decode the budget left is what caps them.
  ASSERT_TRUE(d.h.s.add_request(spec(3, make_prompt(3, 2), 30)).ok());
  d.h.step();  // "a" decodes one, "b" prefills 3
  d.h.s.set_draft_tokens(3, fake_continuation(d.h.s.request(3)->all_token_ids, 20));
  d.h.s.set_draft_tokens(1, {kWrong});
  const StepResult both = d.h.step();
  EXPECT_EQ(find(both.out, 1)->num_tokens, 2);  // 1 is older: scheduled first
  EXPECT_EQ(find(both.out, 3)->num_tokens, 14);
  EXPECT_EQ(find(both.out, 3)->draft_token_ids.size(), 13u);
  EXPECT_EQ(both.out.total_num_scheduled_tokens, 16);
  d.h.run_to_completion();
  EXPECT_EQ(d.a().output_token_ids, d.ref);
  EXPECT_EQ(d.h.s.request(3)->output_token_ids, reference_outputs(make_prompt(3, 2), 30));
}

TEST(SchedulerDrafts, CappedByMaxTokens) {
  Decoding d;  // 1 of 30 outputs
  d.h.s.set_draft_tokens(1, slice(d.ref, 1, 29));
  StepResult r = d.h.step();
  EXPECT_EQ(find(r.out, 1)->draft_token_ids, slice(d.ref, 1, 15));  // the budget of 16 first
  ASSERT_EQ(d.a().num_output_tokens(), 17);
  // 17 outputs: 12 drafts and the token sampled after them reach max_tokens.
  d.h.s.set_draft_tokens(1, slice(d.ref, 17, 13));
  r = d.h.step();
  EXPECT_EQ(find(r.out, 1)->draft_token_ids, slice(d.ref, 17, 12));
  EXPECT_EQ(find_update(r.updates, 1)->new_token_ids, slice(d.ref, 17, 13));
  EXPECT_EQ(find_update(r.updates, 1)->finished, RequestStatus::kFinishedLength);
  EXPECT_EQ(d.a().output_token_ids, d.ref);
}

TEST(SchedulerDrafts, CappedByMaxModelLen) {
  SchedulerConfig c = small_config();
  c.max_model_len = 16;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(12, 1), 100)).ok());
  ASSERT_TRUE(h.s.add_request(spec(4, make_prompt(14, 2), 100)).ok());
  h.step();  // "a" prefills 12; "edge" its first 4
  h.step();  // "edge" prefills its last 10
  ASSERT_EQ(h.s.request(1)->num_tokens(), 14);
  ASSERT_EQ(h.s.request(4)->num_tokens(), 15);
  // Room for 2 tokens after a's 14: one draft and the token sampled after it.
  h.s.set_draft_tokens(1, fake_continuation(h.s.request(1)->all_token_ids, 5));
  // One token from the limit: no room for any draft.
  h.s.set_draft_tokens(4, fake_continuation(h.s.request(4)->all_token_ids, 5));
  const StepResult r = h.step();
  EXPECT_EQ(find(r.out, 1)->num_tokens, 2);
  EXPECT_EQ(find(r.out, 1)->draft_token_ids.size(), 1u);
  EXPECT_EQ(find(r.out, 4)->num_tokens, 1);
  EXPECT_TRUE(find(r.out, 4)->draft_token_ids.empty());
  for (const RequestHandle id : {1, 4}) {
    const Request* req = h.s.request(id);
    EXPECT_EQ(req->num_tokens(), 16) << id;
    EXPECT_EQ(req->status, RequestStatus::kFinishedLength) << id;
    EXPECT_EQ(find_update(r.updates, id)->finished, RequestStatus::kFinishedLength) << id;
  }
  EXPECT_EQ(h.s.request(1)->output_token_ids,
            reference_outputs(spec(5, make_prompt(12, 1), 100), c));
  EXPECT_EQ(h.s.request(4)->output_token_ids,
            reference_outputs(spec(5, make_prompt(14, 2), 100), c));
}

TEST(SchedulerDrafts, NotScheduledOnAPrefillChunk) {
  Harness h(small_config());  // budget 16
  const std::vector<int32_t> prompt = make_prompt(40, 3);
  const std::vector<int32_t> ref = reference_outputs(prompt, 10);
  ASSERT_TRUE(h.s.add_request(spec(1, prompt, 10)).ok());
  h.step();                                   // positions 0..15
  h.s.set_draft_tokens(1, slice(ref, 1, 3));  // to follow the prompt's first sampled token
  StepResult r = h.step();                    // positions 16..31: short of the last token
  EXPECT_EQ(find(r.out, 1)->num_tokens, 16);
  EXPECT_TRUE(find(r.out, 1)->draft_token_ids.empty());
  EXPECT_EQ(h.s.request(1)->draft_token_ids, slice(ref, 1, 3));  // kept for later
  // The last chunk reaches the last prompt token, so drafts ride on it: proposed after the
  // prompt, verified against the worker's own continuation of it.
  h.s.set_draft_tokens(1, fake_continuation(prompt, 3));
  r = h.step();
  EXPECT_EQ(find(r.out, 1)->num_tokens, 8 + 3);
  EXPECT_EQ(find(r.out, 1)->draft_token_ids, slice(ref, 0, 3));
  EXPECT_EQ(find_update(r.updates, 1)->new_token_ids, slice(ref, 0, 4));
  h.run_to_completion();
  EXPECT_EQ(h.s.request(1)->output_token_ids, ref);
}

// Draft positions are never offered to the prefix cache: their K/V may belong to rejected
// tokens, which the next step overwrites. Blocks of 4; "a" has an 8-token prompt (two blocks),
// so its first output sits at position 8 and three drafts fill the third block (8..11).
TEST(SchedulerDrafts, DraftPositionsAreNeverPublished) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(8, 4);
  ASSERT_TRUE(h.s.add_request(spec(1, prompt, 20)).ok());
  h.step();
  const std::vector<int32_t> rejected = {kWrong, kWrong + 1, kWrong + 2};
  h.s.set_draft_tokens(1, rejected);
  StepResult r = h.step();  // computes positions 8..11, the drafts at 9..11; all rejected
  ASSERT_EQ(find_update(r.updates, 1)->num_rejected_drafts, 3u);
  EXPECT_EQ(h.s.request(1)->num_computed_tokens, 9);

  // "b" asks for exactly what block 2 held during that step, and then one more token.
  std::vector<int32_t> b_prompt = prompt;
  b_prompt.push_back(h.s.request(1)->output_token_ids[0]);
  b_prompt.insert(b_prompt.end(), rejected.begin(), rejected.end());
  b_prompt.push_back(7);
  ASSERT_TRUE(h.s.add_request(spec(3, b_prompt, 3)).ok());
  r = h.step();  // "a" recomputes position 9 (overwriting block 2) before "b" could read it
  ASSERT_NE(find_new(r.out, 3), nullptr);
  EXPECT_EQ(find_new(r.out, 3)->num_computed_tokens, 8);
  EXPECT_EQ(h.s.request(3)->num_cached_tokens, 8);

  // Control: once a's positions 8..11 hold real tokens the block is published and hit.
  while (h.s.request(1)->num_computed_tokens < 12) h.step();
  std::vector<int32_t> c_prompt = slice(h.s.request(1)->all_token_ids, 0, 12);
  c_prompt.push_back(7);
  ASSERT_TRUE(h.s.add_request(spec(6, c_prompt, 3)).ok());
  r = h.step();
  ASSERT_NE(find_new(r.out, 6), nullptr);
  EXPECT_EQ(find_new(r.out, 6)->num_computed_tokens, 12);

  h.run_to_completion();
  EXPECT_EQ(h.s.request(3)->output_token_ids, reference_outputs(b_prompt, 3));

  // Accepted drafts are real tokens: the next step offers their block, and a request admitted in
  // that same step already hits it.
  ASSERT_TRUE(h.s.add_request(spec(7, make_prompt(8, 5), 20)).ok());
  r = h.step();
  ASSERT_NE(find_new(r.out, 7), nullptr);
  EXPECT_EQ(find_new(r.out, 7)->num_computed_tokens, 0);  // a prompt never seen
  h.s.set_draft_tokens(7, fake_continuation(h.s.request(7)->all_token_ids, 3));
  r = h.step();
  EXPECT_EQ(find_update(r.updates, 7)->num_rejected_drafts, 0u);
  EXPECT_EQ(h.s.request(7)->num_computed_tokens, 12);
  std::vector<int32_t> e_prompt = slice(h.s.request(7)->all_token_ids, 0, 12);
  e_prompt.push_back(7);
  ASSERT_TRUE(h.s.add_request(spec(8, e_prompt, 2)).ok());
  r = h.step();
  ASSERT_NE(find_new(r.out, 8), nullptr);
  EXPECT_EQ(find_new(r.out, 8)->num_computed_tokens, 12);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(7)->output_token_ids, reference_outputs(make_prompt(8, 5), 20));
  EXPECT_EQ(h.s.request(8)->output_token_ids, reference_outputs(e_prompt, 2));
}

TEST(SchedulerDrafts, StopInsideAcceptedDraftsTruncates) {
  const std::vector<int32_t> ref = reference_outputs(make_prompt(6, 1), 30);
  ASSERT_EQ(std::count(ref.begin(), ref.begin() + 3, ref[2]), 1);
  for (const bool eos : {false, true}) {
    Harness h(small_config());
    RequestSpec a = spec(1, make_prompt(6, 1), 30);
    (eos ? a.stop.eos_token_ids : a.stop.stop_token_ids) = {ref[2]};
    ASSERT_TRUE(h.s.add_request(a).ok());
    h.step();
    h.s.set_draft_tokens(1, slice(ref, 1, 3));
    const StepResult r = h.step();
    ASSERT_EQ(r.result.sampled.size(), 1u);
    EXPECT_EQ(r.result.sampled[0].tokens, slice(ref, 1, 4));  // the worker accepted all
    const RequestUpdate* u = find_update(r.updates, 1);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->new_token_ids, slice(ref, 1, 2));  // up to the stop
    EXPECT_EQ(u->finished, RequestStatus::kFinishedStopped);
    EXPECT_EQ(u->stop_token_id, eos ? std::nullopt : std::optional<int32_t>(ref[2]));
    const Request* req = h.s.request(1);
    EXPECT_EQ(req->status, RequestStatus::kFinishedStopped);
    EXPECT_EQ(req->output_token_ids, slice(ref, 0, 3));
    EXPECT_EQ(req->stop_token_id, u->stop_token_id);
    EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
    EXPECT_EQ(h.step().out.finished_ids, (std::vector<RequestHandle>{1}));
  }
}

TEST(SchedulerDrafts, MaxTokensReachedInsideDrafts) {
  Harness h(small_config());
  const std::vector<int32_t> ref = reference_outputs(make_prompt(6, 1), 30);
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(6, 1), 3)).ok());
  h.step();
  h.s.set_draft_tokens(1, slice(ref, 1, 4));
  const StepResult r = h.step();
  const RequestUpdate* u = find_update(r.updates, 1);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->new_token_ids, slice(ref, 1, 2));
  EXPECT_EQ(u->finished, RequestStatus::kFinishedLength);
  EXPECT_FALSE(u->stop_token_id.has_value());
  EXPECT_EQ(h.s.request(1)->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(h.s.request(1)->output_token_ids, slice(ref, 0, 3));
  EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
}

// Drafts cost blocks like any token: with a pool too small for both, they force a preemption,
// and the preempted request still ends with its own outputs.
TEST(SchedulerDrafts, DraftsUnderPreemptionKeepOutputs) {
  SchedulerConfig c = small_config();
  c.max_model_len = 32;
  c.num_blocks = 9;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(9, make_prompt(8, 1), 20)).ok());
  ASSERT_TRUE(h.s.add_request(spec(10, make_prompt(8, 2), 20)).ok());
  for (int i = 0; i < 200 && h.s.has_unfinished(); ++i) {
    for (const Request* r : h.s.running()) {
      std::vector<int32_t> drafts = fake_continuation(r->all_token_ids, 1 + i % 4);
      if (i % 3 == 0) drafts.back() = kWrong;
      h.s.set_draft_tokens(r->id, std::move(drafts));
    }
    h.step();
  }
  EXPECT_FALSE(h.s.has_unfinished());
  EXPECT_GT(h.s.num_preemptions(), 0);
  EXPECT_GT(h.w.num_accepted_drafts(), 0);
  EXPECT_GT(h.w.num_rejected_drafts(), 0);
  EXPECT_EQ(h.s.request(9)->output_token_ids, reference_outputs(make_prompt(8, 1), 20));
  EXPECT_EQ(h.s.request(10)->output_token_ids, reference_outputs(make_prompt(8, 2), 20));
  EXPECT_EQ(h.s.kv().pool().num_free(), c.num_blocks - 1);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// num_lookahead_tokens: every scheduled request's table covers that many positions past its
// step, while its computed tokens and outputs stay those of a run without lookahead.
TEST(SchedulerDrafts, LookaheadBlocksCoverPositionsPastTheStep) {
  SchedulerConfig c = small_config();
  c.num_lookahead_tokens = 6;
  Harness h(c);
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(6, 3), 12)).ok());
  for (int step = 0; h.s.has_unfinished(); ++step) {
    const StepResult r = h.step();
    const ScheduledTokens* w = find(r.out, 1);
    ASSERT_NE(w, nullptr);
    const int64_t end = start_of(r.out, 1) + w->num_tokens + c.num_lookahead_tokens;
    if (h.s.request(1)->is_finished()) break;
    EXPECT_GE(int64_t(h.s.kv().block_table(1).size()) * c.block_size, end) << step;
    EXPECT_LT(int64_t(h.s.kv().block_table(1).size() - 1) * c.block_size, end) << step;
  }
  EXPECT_EQ(h.s.request(1)->output_token_ids, reference_outputs(make_prompt(6, 3), 12));
  EXPECT_FALSE(validate([] {
                 SchedulerConfig bad = small_config();
                 bad.num_lookahead_tokens = -1;
                 return bad;
               }())
                   .ok());
}

}  // namespace
}  // namespace kestrel
