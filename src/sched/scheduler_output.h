// sched/scheduler_output.h — what one schedule() step asks the model runner to compute. Plain
// data, copied out of the scheduler so the runner never reads scheduler state.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"

namespace kestrel {

struct ScheduledRequest {
  RequestId id;
  int64_t num_new_tokens = 0;  // tokens computed this step
  int64_t start_position = 0;  // position of the first of them (= num_computed_tokens before)
  std::vector<BlockId> block_table;
  // True when the step stops short of the request's last known token: no token is sampled.
  bool is_prefill_chunk = false;
  int64_t num_cached_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  std::vector<RequestId> preempted_ids;  // preempted during this step
  std::vector<RequestId> finished_ids;   // finished or aborted since the previous step
  int64_t total_num_scheduled_tokens = 0;
};

}  // namespace kestrel
