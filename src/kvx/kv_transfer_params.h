// kvx/kv_transfer_params.h — a request's `kv_transfer_params` (issue 21), both ways. The proxy
// sends a prefill instance {do_remote_decode: true} and gets back, in the response, where the
// prompt's KV waits: Kestrel writes a superset of vLLM-Ascend's Mooncake fields (remote host,
// port, engine id, TP size, block size, block ids per KV cache group, number of prompt tokens
// and blocks, the last token it sampled) plus, for a model with linear-attention layers, the
// state slot it holds (remote_state_slot), and its lease (id, epoch, duration; MooncakeConnector
// V2 advertises kv_lease_version and kv_lease_duration the same way). The proxy hands those to a
// decode instance with do_remote_prefill: true. Parsing checks what a consumer needs and refuses
// the rest with a reason (HTTP 400); missing optional fields are allowed. Pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel {

// Where a prompt's KV waits on a producer, as a consumer reads it from the params.
struct RemotePrefillParams {
  std::string engine_id;
  std::string request_id;  // the producer's
  std::string host;
  int port = 0;
  int tp_size = 1;
  int block_size = 0;
  std::vector<int64_t> block_ids;  // group 0, token order
  int64_t num_prompt_tokens = -1;  // -1: not given
  int32_t state_slot = -1;         // a linear-attention model's held state (-1: none)
  uint64_t lease = 0, epoch = 0;
  std::chrono::milliseconds lease_duration{0};
};

struct KvTransferParams {
  bool do_remote_decode = false;  // a producer's request: hold the prompt's KV for a consumer
  std::optional<RemotePrefillParams> remote_prefill;  // a consumer's request
};

// Reads the request field (a JSON object; null or absent: nothing). Errors say what is wrong.
Expected<KvTransferParams> parse_kv_transfer_params(const nlohmann::json& params);

// What a producer puts in its response for a request whose KV it now holds.
struct HeldPrompt {
  std::string engine_id, request_id, host;
  int port = 0, tp_size = 1, block_size = 0;
  std::vector<std::vector<int64_t>> block_ids;  // per group
  int64_t num_prompt_tokens = 0;
  int32_t last_token_id = -1;
  int32_t state_slot = -1;  // -1: none
  uint64_t lease = 0, epoch = 0;
  std::chrono::milliseconds lease_duration{0};
};
nlohmann::json kv_transfer_params_of(const HeldPrompt& held);

}  // namespace kestrel
