// The ModelRunner's linear-attention state slots on a hybrid fixture: steps that would run a
// request without its state, past the slots there are, or copy from or to a slot that is not a
// checkpoint are errors that compute nothing; a finished request's slot serves the next one.
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

TEST_F(StateSlots, ARequestCannotContinueWithoutItsState) {
  SchedulerOutput bad = first_;
  bad.new_requests[0].num_computed_tokens = 4;
  bad.scheduled[0].num_tokens -= 4;
  expect_error(bad, "continues at position 4 without its linear-attention state");
  // With a checkpoint to resume from it may.
  bad.state_loads.push_back(StateCheckpointCopy{7, 2});
  EXPECT_TRUE(runner()->execute(bad).ok());
}

TEST_F(StateSlots, CopiesOnlyBetweenARequestAndACheckpoint) {
  SchedulerOutput bad = first_;
  bad.state_loads.push_back(StateCheckpointCopy{7, 1});  // a running slot, not a checkpoint
  expect_error(bad, "is not one of slots [2, 4)");
  bad = first_;
  bad.state_saves.push_back(StateCheckpointCopy{7, 4});  // past the checkpoints
  expect_error(bad, "no state to save into checkpoint 4");
  bad = first_;
  bad.state_saves.push_back(StateCheckpointCopy{8, 2});  // a request the worker does not run
  expect_error(bad, "request 8: no state to save");
}

TEST_F(StateSlots, NoMoreRunningRequestsThanSlots) {
  Scheduler sched(config());
  ASSERT_TRUE(sched.add_request(sampled_spec(1, kPrompt, 4, 1)).ok());
  ASSERT_TRUE(sched.add_request(sampled_spec(2, kPrompt, 4, 2)).ok());
  const SchedulerOutput two = sched.schedule();
  ASSERT_EQ(two.scheduled.size(), 2u);
  expect_error(two, "all 1 linear-attention state slots are in use", 1);
  EXPECT_TRUE(runner(2)->execute(two).ok());
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
