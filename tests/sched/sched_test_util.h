// Shared helpers of the scheduler tests: small configs, request specs, lookups into one step's
// output, and a scheduler paired with its fake worker.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fake_runner.h"
#include "sched/scheduler.h"

namespace kestrel {

inline std::vector<int32_t> make_prompt(int n, int32_t seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(seed * 1000 + i * 7 + 3);
  return t;
}

inline SchedulerConfig small_config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 8;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_blocks = 128;
  return c;
}

inline RequestSpec spec(RequestHandle id, std::vector<int32_t> prompt, int64_t max_tokens,
                        bool read_prefix_cache = true, std::vector<uint64_t> cache_keys = {}) {
  RequestSpec r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.read_prefix_cache = read_prefix_cache;
  r.cache_keys = std::move(cache_keys);
  return r;
}

inline const ScheduledTokens* find(const SchedulerOutput& out, RequestHandle id) {
  for (const ScheduledTokens& r : out.scheduled)
    if (r.id == id) return &r;
  return nullptr;
}
inline const NewRequestData* find_new(const SchedulerOutput& out, RequestHandle id) {
  for (const NewRequestData& r : out.new_requests)
    if (r.id == id) return &r;
  return nullptr;
}
inline const CachedRequestData* find_cached(const SchedulerOutput& out, RequestHandle id) {
  for (const CachedRequestData& r : out.cached_requests)
    if (r.id == id) return &r;
  return nullptr;
}
// The step's state copies of one kind, in order.
inline std::vector<StateOp> ops_of(const SchedulerOutput& out, StateOpKind kind) {
  std::vector<StateOp> ops;
  for (const StateOp& op : out.state_ops)
    if (op.kind == kind) ops.push_back(op);
  return ops;
}
// The position the request's work starts at this step (its computed tokens), or -1.
inline int64_t start_of(const SchedulerOutput& out, RequestHandle id) {
  if (const NewRequestData* n = find_new(out, id)) return n->num_computed_tokens;
  if (const CachedRequestData* c = find_cached(out, id)) return c->num_computed_tokens;
  return -1;
}
inline const RequestUpdate* find_update(const std::vector<RequestUpdate>& updates,
                                        RequestHandle id) {
  for (const RequestUpdate& u : updates)
    if (u.id == id) return &u;
  return nullptr;
}
// Whether the worker sampled for the request (false: a prefill chunk, or not scheduled).
inline bool sampled(const RunnerOutput& result, RequestHandle id) {
  for (const RequestSamples& s : result.sampled)
    if (s.id == id) return true;
  return false;
}
inline int count(const std::vector<RequestHandle>& ids, RequestHandle id) {
  return static_cast<int>(std::count(ids.begin(), ids.end(), id));
}

// A scheduler and the worker it drives.
struct Harness {
  explicit Harness(const SchedulerConfig& c) : s(c), w(c) {}
  StepResult step() { return fake_step(s, w); }
  // Runs until nothing is left; returns the number of steps.
  int run_to_completion(int max_steps = 10000) {
    int steps = 0;
    while (s.has_unfinished() && steps < max_steps) {
      step();
      ++steps;
    }
    EXPECT_FALSE(s.has_unfinished());
    return steps;
  }
  Scheduler s;
  FakeWorker w;
};

// Outputs of one request run alone in a roomy scheduler, without drafts or prefix caching.
inline std::vector<int32_t> reference_outputs(RequestSpec r, SchedulerConfig c = small_config()) {
  c.enable_prefix_caching = false;
  const RequestHandle id = r.id;
  Harness h(c);
  EXPECT_TRUE(h.s.add_request(std::move(r)).ok());
  h.run_to_completion();
  return h.s.request(id)->output_token_ids;
}
inline std::vector<int32_t> reference_outputs(const std::vector<int32_t>& prompt,
                                              int64_t max_tokens) {
  return reference_outputs(spec(1, prompt, max_tokens));
}

}  // namespace kestrel
