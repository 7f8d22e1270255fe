// sched/request.h — one generation request as the scheduler sees it: its tokens and how many of
// them already have K/V in the cache (num_computed_tokens), which the scheduler drives towards
// num_tokens() step by step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kestrel {

enum class RequestStatus {
  kWaiting,
  kWaitingForRemoteKvs,  // reserved for prefill/decode disaggregation
  kRunning,
  kPreempted,
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

bool is_finished_status(RequestStatus status);
const char* status_name(RequestStatus status);

struct Request {
  Request(RequestId id, std::vector<int32_t> prompt, int64_t max_tokens, int64_t arrival);

  RequestId id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  // Prompt then outputs, kept contiguous for prefix-cache hashing.
  std::vector<int32_t> all_token_ids;
  int64_t num_computed_tokens = 0;
  int64_t max_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  int64_t arrival = 0;
  // Prompt tokens served by the prefix cache at first admission (usage.cached_tokens).
  int64_t num_cached_tokens = 0;
  bool read_prefix_cache = true;  // false: never start from cached blocks
  // Mixed into every block hash (a hashed cache_salt): requests with different keys never
  // share cached blocks.
  std::vector<uint64_t> cache_keys;

  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids.size()); }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_token_ids.size()); }
  bool is_finished() const { return is_finished_status(status); }
  void append_output_token(int32_t token);
};

}  // namespace kestrel
