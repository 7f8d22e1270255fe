// Linear-attention state slots on a hybrid fixture: the scheduler gives every running request a
// slot of its own and takes it back when the request ends, so a finished request's slot serves
// the next one; the runner refuses work without a running slot or past the slots it has, and
// copies that reach outside its storage, computing nothing.
#include <gtest/gtest.h>

#include "runner/model_runner.h"
#include "runner/runner_driver.h"

namespace kestrel {
namespace {

using test::sampled_spec;

std::unique_ptr<LoadedModel> load_hybrid() {
  LoadOptions o;
  o.model = test::fixtures_dir() + "/models/qwen3_5_f32";
  o.threads = 2;
  auto m = load_model(o);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : nullptr;
}

SchedulerConfig config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_model_len = 64;
  c.max_num_seqs = 2;
  c.has_recurrent_state = true;
  c.num_state_checkpoints = 2;
  return c;
}

const std::vector<int32_t> kPrompt = {5, 77, 301, 42, 9, 250, 13, 400, 88};

class StateSlots : public ::testing::Test {
 protected:
  void SetUp() override {
    lm_ = load_hybrid();
    ASSERT_TRUE(lm_);
    Scheduler sched(config());
    ASSERT_TRUE(sched.add_request(sampled_spec(7, kPrompt, 4, 1)).ok());
    first_ = sched.schedule();
    ASSERT_EQ(first_.new_requests.size(), 1u);
  }

  std::unique_ptr<ModelRunner> runner(int32_t slots = 2, int32_t checkpoints = 2) const {
    return std::make_unique<ModelRunner>(*lm_->model,
                                         lm_->model->make_kv_cache(64, 4, slots, checkpoints));
  }

  void expect_error(const SchedulerOutput& out, const std::string& what, int32_t slots = 2) const {
    auto r = runner(slots)->execute(out);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  }

  std::unique_ptr<LoadedModel> lm_;
  SchedulerOutput first_;
};

TEST_F(StateSlots, WorkNeedsOneOfTheRunningSlots) {
  ASSERT_EQ(first_.scheduled[0].state_slot, 0);
  SchedulerOutput bad = first_;
  bad.scheduled[0].state_slot = -1;
  expect_error(bad, "state slot -1 is not one of the 2 running slots");
  bad.scheduled[0].state_slot = 2;  // a checkpoint
  expect_error(bad, "state slot 2 is not one of the 2 running slots");
  EXPECT_TRUE(runner()->execute(first_).ok());
}

TEST_F(StateSlots, CopiesStayWithinTheStorage) {
  SchedulerOutput bad = first_;
  bad.state_ops.push_back(StateOp{StateOpKind::kCopyBefore, 7, 4, -1, 0});  // past the slots
  expect_error(bad, "no state copy from slot 4 (snapshot -1) to slot 0 of 4");
  bad = first_;
  bad.state_ops.push_back(StateOp{StateOpKind::kCopyAfter, 7, 0, -1, -1});
  expect_error(bad, "no state copy from slot 0 (snapshot -1) to slot -1 of 4");
  bad = first_;
  // A checkpoint has no draft snapshots.
  bad.state_ops.push_back(StateOp{StateOpKind::kCopyBefore, 7, 2, 0, 3});
  expect_error(bad, "no state copy from slot 2 (snapshot 0) to slot 3 of 4");
}

TEST_F(StateSlots, RunningRequestsHoldDistinctSlotsUntilTheyEnd) {
  Scheduler sched(config());
  ASSERT_TRUE(sched.add_request(sampled_spec(1, kPrompt, 4, 1)).ok());
  ASSERT_TRUE(sched.add_request(sampled_spec(2, kPrompt, 4, 2)).ok());
  ASSERT_TRUE(sched.add_request(sampled_spec(3, kPrompt, 4, 3)).ok());  // waits: two run at most
  const SchedulerOutput two = sched.schedule();
  ASSERT_EQ(two.scheduled.size(), 2u);
  EXPECT_NE(two.scheduled[0].state_slot, two.scheduled[1].state_slot);
  for (const ScheduledTokens& w : two.scheduled)
    EXPECT_TRUE(w.state_slot == 0 || w.state_slot == 1);
  // A runner with one slot cannot run the second.
  expect_error(two, "state slot 1 is not one of the 1 running slots", 1);
  // The first ends: the waiting one takes its slot.
  const int32_t freed = two.scheduled[0].state_slot;
  sched.abort(1);
  const SchedulerOutput next = sched.schedule();
  const ScheduledTokens* third = nullptr;
  for (const ScheduledTokens& w : next.scheduled)
    if (w.id == 3) third = &w;
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->state_slot, freed);
}

TEST_F(StateSlots, OneSlotServesRequestsOneAfterAnother) {
  SchedulerConfig c = config();
  c.max_num_seqs = 1;
  test::RunnerDriver d(*lm_, c);
  ASSERT_TRUE(d.sched.add_request(sampled_spec(1, kPrompt, 5, 3, 0.0f)).ok());
  ASSERT_TRUE(d.sched.add_request(sampled_spec(2, kPrompt, 5, 4, 0.0f)).ok());
  const test::DriverRun r = d.run();
  ASSERT_EQ(r.outputs.at(1).size(), 5u);
  // The second reuses the first's slot: from a zero state or a checkpoint, never what the first
  // left there.
  EXPECT_EQ(r.outputs.at(1), r.outputs.at(2));
}

}  // namespace
}  // namespace kestrel
