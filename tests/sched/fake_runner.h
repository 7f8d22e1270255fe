// Test stand-in for the model runner: checks each scheduled request against the scheduler's
// state and "samples" a token that depends only on the request's tokens so far, so a request
// yields the same outputs however its computation was split, cached or preempted.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <unordered_map>

#include "sched/scheduler.h"

namespace kestrel {

inline int32_t fake_next_token(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % 30000) + 1;
}

inline std::unordered_map<RequestId, int32_t> fake_run(const Scheduler& s,
                                                       const SchedulerOutput& out) {
  std::unordered_map<RequestId, int32_t> sampled;
  const int64_t bs = s.config().block_size;
  for (const ScheduledRequest& r : out.scheduled) {
    const Request* req = s.request(r.id);
    EXPECT_NE(req, nullptr);
    if (req == nullptr) continue;
    const int64_t end = r.start_position + r.num_new_tokens;
    EXPECT_GT(r.num_new_tokens, 0);
    EXPECT_EQ(r.start_position, req->num_computed_tokens) << r.id;
    EXPECT_LE(end, req->num_tokens()) << r.id;
    EXPECT_LE(end, s.config().max_model_len) << r.id;
    EXPECT_GE(static_cast<int64_t>(r.block_table.size()) * bs, end) << r.id;
    for (BlockId b : r.block_table) EXPECT_NE(b, kNullBlock) << r.id;
    EXPECT_EQ(r.is_prefill_chunk, end < req->num_tokens()) << r.id;
    if (!r.is_prefill_chunk) {
      sampled[r.id] = fake_next_token(std::span<const int32_t>(req->all_token_ids).first(end));
    }
  }
  return sampled;
}

// One engine step: schedule, run, apply.
inline SchedulerOutput fake_step(Scheduler& s) {
  SchedulerOutput out = s.schedule();
  s.update_from_output(out, fake_run(s, out));
  return out;
}

}  // namespace kestrel
