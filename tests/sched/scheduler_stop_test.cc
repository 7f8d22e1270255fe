// Stop rules, applied by the scheduler to every sampled token: EOS, the request's own stop ids
// (reported), min_tokens holding both off, max_tokens and max_model_len (checked first, as vLLM).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace kestrel {
namespace {

constexpr int kMaxTokens = 10;

// The outputs a prompt produces without stop rules; every token in them is distinct, so a stop
// on output i can only fire there.
std::vector<int32_t> plain_outputs(const std::vector<int32_t>& prompt) {
  std::vector<int32_t> ref = reference_outputs(prompt, kMaxTokens);
  std::vector<int32_t> sorted = ref;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  return ref;
}

struct StopRun {
  std::vector<int32_t> outputs;
  RequestStatus status;
  std::optional<int32_t> stop_token_id;
  RequestUpdate last_update;  // of the step that finished it
};

StopRun run(RequestSpec r) {
  Harness h(small_config());
  const RequestHandle id = r.id;
  EXPECT_TRUE(h.s.add_request(std::move(r)).ok());
  StopRun out;
  while (h.s.has_unfinished()) {
    const StepResult step = h.step();
    if (const RequestUpdate* u = find_update(step.updates, id)) out.last_update = *u;
  }
  const Request* req = h.s.request(id);
  out.outputs = req->output_token_ids;
  out.status = req->status;
  out.stop_token_id = req->stop_token_id;
  EXPECT_EQ(h.s.kv().pool().num_free(), small_config().num_blocks - 1);
  return out;
}

std::vector<int32_t> first(const std::vector<int32_t>& v, size_t n) {
  return {v.begin(), v.begin() + n};
}

TEST(SchedulerStop, EosStopsWithoutStopTokenId) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 1));
  RequestSpec r = spec(1, make_prompt(6, 1), kMaxTokens);
  r.stop.eos_token_ids = {30001, ref[3]};
  const StopRun got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 4));  // the EOS token is kept as an output
  EXPECT_EQ(got.status, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(got.stop_token_id.has_value());
  EXPECT_EQ(got.last_update.finished, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(got.last_update.stop_token_id.has_value());
  EXPECT_EQ(got.last_update.new_token_ids, (std::vector<int32_t>{ref[3]}));
}

TEST(SchedulerStop, ListedStopIdStopsAndIsReported) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 2));
  RequestSpec r = spec(1, make_prompt(6, 2), kMaxTokens);
  r.stop.stop_token_ids = {ref[5], 30002};
  r.stop.eos_token_ids = {30001};
  const StopRun got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 6));
  EXPECT_EQ(got.status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(got.stop_token_id, ref[5]);
  EXPECT_EQ(got.last_update.finished, RequestStatus::kFinishedStopped);
  EXPECT_EQ(got.last_update.stop_token_id, ref[5]);
}

TEST(SchedulerStop, NeitherStopsBeforeMinTokens) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 3));
  // EOS on the 2nd output, a stop id on the 3rd: min_tokens 4 holds both off.
  RequestSpec r = spec(1, make_prompt(6, 3), kMaxTokens);
  r.stop.eos_token_ids = {ref[1]};
  r.stop.stop_token_ids = {ref[2]};
  r.stop.min_tokens = 4;
  StopRun got = run(r);
  EXPECT_EQ(got.outputs, ref);
  EXPECT_EQ(got.status, RequestStatus::kFinishedLength);
  EXPECT_FALSE(got.stop_token_id.has_value());

  // At exactly min_tokens outputs a stop counts: the 3rd output stops with min_tokens 3 ...
  r.stop.min_tokens = 3;
  got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 3));
  EXPECT_EQ(got.stop_token_id, ref[2]);
  // ... and the 2nd (EOS) with min_tokens 2.
  r.stop.min_tokens = 2;
  got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 2));
  EXPECT_EQ(got.status, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(got.stop_token_id.has_value());
}

TEST(SchedulerStop, EosWinsWhenATokenIsBoth) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 4));
  RequestSpec r = spec(1, make_prompt(6, 4), kMaxTokens);
  r.stop.eos_token_ids = {ref[2]};
  r.stop.stop_token_ids = {ref[2]};
  const StopRun got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 3));
  EXPECT_EQ(got.status, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(got.stop_token_id.has_value());
  EXPECT_FALSE(got.last_update.stop_token_id.has_value());
}

TEST(SchedulerStop, FirstOutputCanStop) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 5));
  RequestSpec r = spec(1, make_prompt(6, 5), kMaxTokens);
  r.stop.stop_token_ids = {ref[0]};
  const StopRun got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 1));
  EXPECT_EQ(got.stop_token_id, ref[0]);
}

// vLLM checks the length limits first: the max_tokens-th token being EOS or a stop id still
// ends the request with "length" and no stop_reason.
TEST(SchedulerStop, LengthWinsOverAStopOnTheLastToken) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 8));
  RequestSpec r = spec(1, make_prompt(6, 8), 3);
  r.stop.eos_token_ids = {ref[2]};
  StopRun got = run(r);
  EXPECT_EQ(got.outputs, first(ref, 3));
  EXPECT_EQ(got.status, RequestStatus::kFinishedLength);
  r = spec(2, make_prompt(6, 8), 3);
  r.stop.stop_token_ids = {ref[2]};
  got = run(r);
  EXPECT_EQ(got.status, RequestStatus::kFinishedLength);
  EXPECT_FALSE(got.stop_token_id.has_value());
  EXPECT_FALSE(got.last_update.stop_token_id.has_value());
}

TEST(SchedulerStop, MaxTokensAndMaxModelLenEndWithLength) {
  const std::vector<int32_t> ref = plain_outputs(make_prompt(6, 6));
  StopRun got = run(spec(1, make_prompt(6, 6), 4));
  EXPECT_EQ(got.outputs, first(ref, 4));
  EXPECT_EQ(got.status, RequestStatus::kFinishedLength);
  EXPECT_EQ(got.last_update.finished, RequestStatus::kFinishedLength);
  EXPECT_FALSE(got.stop_token_id.has_value());

  // small_config's max_model_len is 64: a 60-token prompt has room for 4 outputs.
  got = run(spec(2, make_prompt(60, 7), 100));
  EXPECT_EQ(got.outputs.size(), 4u);
  EXPECT_EQ(got.status, RequestStatus::kFinishedLength);
  EXPECT_EQ(got.last_update.finished, RequestStatus::kFinishedLength);
}

}  // namespace
}  // namespace kestrel
