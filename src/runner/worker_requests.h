// runner/worker_requests.h — the worker's own copy of every request the scheduler sent it,
// rebuilt only from SchedulerOutput deltas (NewRequestData once, CachedRequestData after) and the
// tokens the worker sampled itself: it never reads scheduler memory, so the same code serves a
// worker in another process. Owned by the ModelRunner; only the thread running steps touches it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/request_table.h"
#include "base/status.h"
#include "sched/scheduler_output.h"

namespace kestrel {

struct WorkerRequest {
  // Prompt then every token this worker sampled and the scheduler kept (a stop that cuts a
  // step's tokens short finishes the request, so the difference never matters).
  std::vector<int32_t> all_tokens;
  size_t num_prompt_tokens = 0;
  GroupBlockIds block_ids;
  int64_t num_computed_tokens = 0;
  RequestSampling sampling;
  SamplerRng rng;  // the request's random stream: seed and draws so far
  // Its linear-attention running state slot in its latest step (-1: none), as the scheduler
  // gave it (ScheduledTokens::state_slot).
  int32_t state_slot = -1;

  std::span<const int32_t> prompt() const {
    return std::span<const int32_t>(all_tokens).first(num_prompt_tokens);
  }
  std::span<const int32_t> outputs() const {
    return std::span<const int32_t>(all_tokens).subspan(num_prompt_tokens);
  }
};

class WorkerRequests {
 public:
  // Applies a step's deltas: drops finished requests, adds new ones, updates cached ones. An
  // error (a cached id it never saw, a new id twice, mismatched groups) means the two sides
  // disagree about the requests; nothing of that step is applied then.
  Status apply(const SchedulerOutput& output);

  WorkerRequest* find(RequestHandle id);
  size_t size() const { return requests_.size(); }

 private:
  RequestTable<WorkerRequest> requests_;
};

}  // namespace kestrel
