#include "sched/request.h"

#include <utility>

namespace kestrel {

bool is_finished_status(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

const char* status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kWaitingForRemoteKvs:
      return "waiting_for_remote_kvs";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinishedStopped:
      return "finished_stopped";
    case RequestStatus::kFinishedLength:
      return "finished_length";
    case RequestStatus::kFinishedAborted:
      return "finished_aborted";
  }
  return "unknown";
}

Request::Request(RequestSpec spec, int64_t arrival_in)
    : id(std::move(spec.id)),
      prompt_token_ids(std::move(spec.prompt)),
      all_token_ids(prompt_token_ids),
      max_tokens(spec.max_tokens),
      arrival(arrival_in),
      read_prefix_cache(spec.read_prefix_cache),
      cache_keys(std::move(spec.cache_keys)),
      sampling(std::move(spec.sampling)),
      stop(std::move(spec.stop)),
      remote_decode(spec.remote_decode),
      remote_prefill(std::move(spec.remote_prefill)) {}

void Request::append_output_token(int32_t token) {
  output_token_ids.push_back(token);
  all_token_ids.push_back(token);
}

}  // namespace kestrel
