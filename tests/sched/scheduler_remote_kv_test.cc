// Prefill/decode disaggregation in the scheduler. Producer: a remote-decode request's blocks
// are held, not freed, when it finishes (and its handle is free at once), and come back when
// the engine frees them; an aborted one frees at once. Consumer: a remote-prefill request loads
// only what its local prefix hit lacks, is never computed while loading, continues from its last
// prompt token once loaded (the same outputs as a local run), prefills locally when the load is
// given up (recompute) or ends when it fails; a request that ends mid-load leaves its blocks with
// the load until the workers report it; loads are bounded like running requests. Models with
// linear-attention layers: the producer holds the state before the prompt's last token in a
// checkpoint slot leased with the blocks (waiting for one when all are held), the consumer loads
// it into one of its own, copied in when the request resumes, and every exit gives the slots
// back.
#include <gtest/gtest.h>

#include "fake_runner.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

RequestSpec remote(RequestHandle id, std::vector<int32_t> prompt, int64_t max_tokens,
                   int64_t num_remote_blocks = 32) {
  RequestSpec r = spec(id, std::move(prompt), max_tokens);
  RemotePrefill p;
  p.host = "10.0.0.9";
  p.port = 30200;
  p.tp_size = 2;
  for (int64_t i = 0; i < num_remote_blocks; ++i) p.blocks.push_back(500 + i);
  r.remote_prefill = p;
  return r;
}

int64_t used_blocks(const Scheduler& s) {
  return s.config().num_blocks - 1 - s.kv().pool().num_free();
}

TEST(SchedulerRemoteKv, AProducerHoldsAFinishedRequestsBlocksUntilFreed) {
  Harness h(small_config());
  RequestSpec r = spec(1, make_prompt(10, 1), 1);
  r.remote_decode = true;
  ASSERT_TRUE(h.s.add_request(r).ok());
  h.step();
  ASSERT_EQ(h.s.request(1)->status, RequestStatus::kFinishedLength);
  auto held = h.s.take_held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].first, 1u);
  ASSERT_EQ(held[0].second.blocks.size(), 1u);
  EXPECT_EQ(held[0].second.blocks[0].size(), 3u);  // 10 tokens (+1 sampled) in blocks of 4
  EXPECT_EQ(held[0].second.state_slot, -1);        // no linear-attention state
  EXPECT_EQ(used_blocks(h.s), 3);
  EXPECT_TRUE(h.s.take_held().empty());
  // The handle serves a new request meanwhile (after the worker has dropped the old one).
  h.s.release(1);
  h.step();
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(6, 2), 2)).ok());
  h.run_to_completion();
  EXPECT_EQ(used_blocks(h.s), 3);
  h.s.free_held(held[0].second);
  EXPECT_EQ(used_blocks(h.s), 0);
  // Aborted: nothing to hand over.
  RequestSpec a = spec(2, make_prompt(10, 3), 1);
  a.remote_decode = true;
  ASSERT_TRUE(h.s.add_request(a).ok());
  h.s.abort(2);
  EXPECT_TRUE(h.s.take_held().empty());
  EXPECT_EQ(used_blocks(h.s), 0);
}

TEST(SchedulerRemoteKv, AConsumerLoadsWhatItsPrefixHitLacksThenDecodesFromTheLastToken) {
  SchedulerConfig c = small_config();
  Harness h(c);
  const std::vector<int32_t> prompt = make_prompt(14, 5);  // 4 blocks, the last partial
  // A local prefix hit of two blocks: a request with the same first 8 tokens ran here.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 9);
  ASSERT_TRUE(h.s.add_request(spec(9, other, 1)).ok());
  h.run_to_completion();
  ASSERT_TRUE(h.s.add_request(remote(1, prompt, 5)).ok());
  StepResult r = h.step();
  ASSERT_EQ(r.out.kv_loads.size(), 1u);
  const KvLoad load = r.out.kv_loads[0];
  EXPECT_EQ(load.id, 1u);
  EXPECT_EQ(load.host, "10.0.0.9");
  EXPECT_EQ(load.port, 30200);
  EXPECT_EQ(load.tp_size, 2);
  EXPECT_EQ(load.remote_blocks, (std::vector<int64_t>{502, 503}));  // blocks 2 and 3 only
  EXPECT_EQ(load.local_blocks.size(), 2u);
  EXPECT_EQ(find(r.out, 1), nullptr);  // not computed while loading
  EXPECT_EQ(h.s.request(1)->status, RequestStatus::kWaitingForRemoteKvs);
  EXPECT_EQ(h.s.num_waiting(), 1u);
  EXPECT_TRUE(h.s.has_unfinished());
  // Steps meanwhile schedule nothing for it.
  EXPECT_EQ(find(h.step().out, 1), nullptr);
  EXPECT_EQ(h.s.kv_load_reported(load.load_id), std::optional<RequestHandle>(1));
  h.w.load(load, prompt, 2);
  h.s.kv_load_decided(1, /*loaded=*/true, /*recompute=*/true);
  r = h.step();
  const ScheduledTokens* w = find(r.out, 1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->num_tokens, 1);  // the last prompt token, whose logits give the first output
  EXPECT_EQ(start_of(r.out, 1), 13);
  EXPECT_TRUE(sampled(r.result, 1));
  h.run_to_completion();
  EXPECT_EQ(h.s.request(1)->output_token_ids, reference_outputs(prompt, 5));
  EXPECT_EQ(h.s.request(1)->num_cached_tokens, 8);
  EXPECT_EQ(used_blocks(h.s), 0);
}

TEST(SchedulerRemoteKv, AGivenUpLoadPrefillsLocallyAndAFailedOneEnds) {
  Harness h(small_config());
  const std::vector<int32_t> prompt = make_prompt(11, 6);
  ASSERT_TRUE(h.s.add_request(remote(1, prompt, 4)).ok());
  ASSERT_TRUE(h.s.add_request(remote(2, make_prompt(7, 7), 4)).ok());
  const StepResult r = h.step();
  ASSERT_EQ(r.out.kv_loads.size(), 2u);
  ASSERT_TRUE(h.s.kv_load_reported(r.out.kv_loads[0].load_id).has_value());
  ASSERT_TRUE(h.s.kv_load_reported(r.out.kv_loads[1].load_id).has_value());
  h.s.kv_load_decided(1, /*loaded=*/false, /*recompute=*/true);
  h.s.kv_load_decided(2, /*loaded=*/false, /*recompute=*/false);
  EXPECT_EQ(h.s.request(2)->status, RequestStatus::kFinishedAborted);
  const StepResult next = h.step();
  ASSERT_NE(find(next.out, 1), nullptr);
  EXPECT_EQ(find(next.out, 1)->num_tokens, 11);  // the whole prompt, computed here
  h.run_to_completion();
  EXPECT_EQ(h.s.request(1)->output_token_ids, reference_outputs(prompt, 4));
  EXPECT_EQ(used_blocks(h.s), 0);
}

TEST(SchedulerRemoteKv, ARequestEndingMidLoadLeavesItsBlocksWithTheLoad) {
  Harness h(small_config());
  ASSERT_TRUE(h.s.add_request(remote(1, make_prompt(13, 8), 4)).ok());
  const StepResult r = h.step();
  ASSERT_EQ(r.out.kv_loads.size(), 1u);
  const uint64_t load_id = r.out.kv_loads[0].load_id;
  EXPECT_EQ(used_blocks(h.s), 4);
  EXPECT_EQ(h.s.num_loads_in_flight(), 1u);
  h.s.abort(1);
  EXPECT_EQ(used_blocks(h.s), 4);  // still being written
  EXPECT_TRUE(h.s.has_unfinished());
  // Nothing left to decide, but the engine must still step to hear the load end.
  EXPECT_EQ(h.s.num_loading(), 0u);
  EXPECT_EQ(h.s.num_loads_in_flight(), 1u);
  // The handle is reused (once the worker has dropped it), with other blocks.
  h.s.release(1);
  h.step();
  ASSERT_TRUE(h.s.add_request(spec(1, make_prompt(5, 9), 2)).ok());
  for (int i = 0; i < 100 && !h.s.request(1)->is_finished(); ++i) h.step();
  ASSERT_TRUE(h.s.request(1)->is_finished());
  EXPECT_EQ(h.s.kv_load_reported(load_id), std::nullopt);  // the request is gone: freed now
  EXPECT_EQ(used_blocks(h.s), 0);
  EXPECT_EQ(h.s.num_loads_in_flight(), 0u);
  EXPECT_FALSE(h.s.has_unfinished());
}

TEST(SchedulerRemoteKv, LoadsAreBoundedAndWaitForBlocks) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 2;
  c.max_model_len = 32;
  c.num_blocks = 9;  // 8 usable: two prompts of 4 blocks
  Harness h(c);
  for (RequestHandle id = 1; id <= 3; ++id)
    ASSERT_TRUE(h.s.add_request(remote(id, make_prompt(15, int32_t(id)), 1)).ok());
  const StepResult r = h.step();
  EXPECT_EQ(r.out.kv_loads.size(), 2u);
  EXPECT_EQ(h.s.num_loading(), 2u);
  EXPECT_EQ(h.s.num_waiting(), 3u);
  EXPECT_TRUE(h.step().out.kv_loads.empty());
}

// Linear-attention models: the recurrent state moves with the blocks.
SchedulerConfig hybrid_config(int32_t checkpoints = 2) {
  SchedulerConfig c = small_config();
  c.has_recurrent_state = true;
  c.num_state_checkpoints = checkpoints;
  return c;
}

int32_t first_checkpoint(const SchedulerConfig& c) {
  return int32_t(c.max_num_seqs);
}

TEST(SchedulerRemoteKvHybrid, AProducerHoldsTheStateBeforeThePromptsLastTokenWithItsBlocks) {
  SchedulerConfig c = hybrid_config();
  c.max_num_batched_tokens = 6;  // 11 tokens: chunks of 6 and 5
  c.enable_prefix_caching = false;
  Harness h(c);
  RequestSpec r = spec(1, make_prompt(11, 1), 1);
  r.remote_decode = true;
  ASSERT_TRUE(h.s.add_request(r).ok());
  const StepResult first = h.step();
  EXPECT_TRUE(ops_of(first.out, StateOpKind::kHold).empty());  // this chunk stops short of the end
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);              // taken at admission
  const StepResult last = h.step();
  const std::vector<StateOp> holds = ops_of(last.out, StateOpKind::kHold);
  ASSERT_EQ(holds.size(), 1u);
  const int32_t slot = holds[0].dst;
  EXPECT_EQ(holds[0].id, 1u);
  ASSERT_NE(find(last.out, 1), nullptr);
  EXPECT_EQ(holds[0].src, find(last.out, 1)->state_slot);  // from the request's running slot
  EXPECT_GE(slot, first_checkpoint(c));
  ASSERT_EQ(h.s.request(1)->status, RequestStatus::kFinishedLength);
  auto held = h.s.take_held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].second.state_slot, slot);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);  // held with the blocks
  h.s.free_held(held[0].second);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 0);
  EXPECT_EQ(used_blocks(h.s), 0);
  // Aborted before its end: the slot comes back at once.
  RequestSpec a = spec(2, make_prompt(11, 2), 1);
  a.remote_decode = true;
  ASSERT_TRUE(h.s.add_request(a).ok());
  h.step();
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);
  h.s.abort(2);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 0);
}

TEST(SchedulerRemoteKvHybrid, ProducersWaitForAFreeSlotAndNoSlotsIsAnError) {
  SchedulerConfig c = hybrid_config(1);
  c.enable_prefix_caching = false;
  Harness h(c);
  for (RequestHandle id = 1; id <= 2; ++id) {
    RequestSpec r = spec(id, make_prompt(5, int32_t(id)), 1);
    r.remote_decode = true;
    ASSERT_TRUE(h.s.add_request(r).ok());
  }
  h.step();
  auto held = h.s.take_held();
  ASSERT_EQ(held.size(), 1u);  // the second waits: the one slot is held
  EXPECT_EQ(h.s.num_waiting(), 1u);
  h.step();
  EXPECT_EQ(h.s.num_waiting(), 1u);
  h.s.free_held(held[0].second);
  h.step();
  EXPECT_EQ(h.s.take_held().size(), 1u);
  Harness none(hybrid_config(0));
  RequestSpec r = spec(3, make_prompt(5, 3), 1);
  r.remote_decode = true;
  const Status st = none.s.add_request(r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no state slot"), std::string::npos) << st.message();
}

TEST(SchedulerRemoteKvHybrid, AConsumerLoadsTheStateAndCopiesItWhenItResumes) {
  SchedulerConfig c = hybrid_config();
  Harness h(c);
  const std::vector<int32_t> prompt = make_prompt(14, 5);
  // A local run of the same prompt: no prefix hit for a load of this model (the state comes
  // whole from the producer).
  ASSERT_TRUE(h.s.add_request(spec(9, prompt, 1)).ok());
  h.run_to_completion();
  RequestSpec r = remote(1, prompt, 5);
  r.remote_prefill->state_slot = 42;
  ASSERT_TRUE(h.s.add_request(r).ok());
  const StepResult admitted = h.step();
  ASSERT_EQ(admitted.out.kv_loads.size(), 1u);
  const KvLoad load = admitted.out.kv_loads[0];
  EXPECT_EQ(load.remote_blocks.size(), 4u);  // every block of the prompt
  EXPECT_EQ(load.remote_state, 42);
  EXPECT_GE(load.local_state, first_checkpoint(c));
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);
  ASSERT_TRUE(h.s.kv_load_reported(load.load_id).has_value());
  h.w.load(load, prompt, 0);
  h.s.kv_load_decided(1, /*loaded=*/true, /*recompute=*/true);
  const StepResult resumed = h.step();
  ASSERT_NE(find(resumed.out, 1), nullptr);
  EXPECT_EQ(find(resumed.out, 1)->num_tokens, 1);  // the prompt's last token, from the state
  EXPECT_EQ(ops_of(resumed.out, StateOpKind::kCopyBefore),
            (std::vector<StateOp>{{StateOpKind::kCopyBefore, 1, load.local_state, -1,
                                   find(resumed.out, 1)->state_slot}}));
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);  // until that step has run
  h.step();
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 0);
  h.run_to_completion();
  EXPECT_EQ(h.s.request(1)->output_token_ids, reference_outputs(prompt, 5));
}

TEST(SchedulerRemoteKvHybrid, AFailedOrAbandonedLoadGivesTheStateSlotBack) {
  Harness h(hybrid_config());
  RequestSpec a = remote(1, make_prompt(9, 6), 3), b = remote(2, make_prompt(9, 7), 3);
  a.remote_prefill->state_slot = b.remote_prefill->state_slot = 3;
  ASSERT_TRUE(h.s.add_request(a).ok());
  ASSERT_TRUE(h.s.add_request(b).ok());
  const StepResult r = h.step();
  ASSERT_EQ(r.out.kv_loads.size(), 2u);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 2);
  // Recompute: the slot is free at once, and the whole prompt runs here from position 0.
  ASSERT_TRUE(h.s.kv_load_reported(r.out.kv_loads[0].load_id).has_value());
  h.s.kv_load_decided(1, /*loaded=*/false, /*recompute=*/true);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);
  const StepResult next = h.step();
  ASSERT_NE(find(next.out, 1), nullptr);
  EXPECT_EQ(start_of(next.out, 1), 0);
  EXPECT_TRUE(ops_of(next.out, StateOpKind::kCopyBefore).empty());
  // Aborted mid-load: the slot goes with the load until the workers report it.
  h.s.abort(2);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 1);
  EXPECT_EQ(h.s.kv_load_reported(r.out.kv_loads[1].load_id), std::nullopt);
  EXPECT_EQ(h.s.kv().num_taken_state_slots(), 0);
  h.run_to_completion();
  EXPECT_EQ(used_blocks(h.s), 0);
}

}  // namespace
}  // namespace kestrel
