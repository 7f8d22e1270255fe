#include "engine/protocol.h"

#include <utility>

namespace kestrel {

Status check_output_limits(const EngineRequest& r, const std::string& id) {
  if (r.max_tokens < 1) return make_error("request {}: max_tokens must be at least 1", id);
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    return make_error("request {}: min_tokens {} must be in [0, max_tokens {}]", id, r.min_tokens,
                      r.max_tokens);
  return Status::Ok();
}

KvTransferParams remote_prefill_of(const KvTransferResult& held) {
  RemotePrefillParams r;
  r.engine_id = held.engine_id;
  r.request_id = held.request_id;
  r.host = held.host;
  r.port = held.port;
  r.tp_size = held.tp_size;
  r.block_size = held.block_size;
  if (!held.block_ids.empty()) r.block_ids = held.block_ids[0];
  r.num_prompt_tokens = held.num_prompt_tokens;
  r.state_slot = held.state_slot;
  r.lease = held.lease;
  r.epoch = held.epoch;
  r.lease_duration = held.lease_duration;
  KvTransferParams p;
  p.remote_prefill = std::move(r);
  return p;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

void RequestOutput::merge(RequestOutput&& later) {
  token_ids.insert(token_ids.end(), later.token_ids.begin(), later.token_ids.end());
  text += later.text;
  logprobs.insert(logprobs.end(), std::make_move_iterator(later.logprobs.begin()),
                  std::make_move_iterator(later.logprobs.end()));
  prompt_logprobs.insert(prompt_logprobs.end(),
                         std::make_move_iterator(later.prompt_logprobs.begin()),
                         std::make_move_iterator(later.prompt_logprobs.end()));
  if (later.finish_reason) {
    finish_reason = later.finish_reason;
    stop_reason = std::move(later.stop_reason);
    error = std::move(later.error);
    invalid_request = later.invalid_request;
  }
  num_prompt_tokens = later.num_prompt_tokens;
  num_cached_tokens = later.num_cached_tokens;
  num_output_tokens = later.num_output_tokens;
  if (later.first_scheduled) first_scheduled = later.first_scheduled;
  engine_index = later.engine_index;
  if (later.kv_transfer) kv_transfer = std::move(later.kv_transfer);
}

}  // namespace kestrel
