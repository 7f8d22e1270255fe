// server/protocol/kv_transfer_params.h — a request's `kv_transfer_params` (issue 21) as JSON, both
// ways (the plain structs are engine/protocol.h's). The proxy
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
#include "engine/protocol.h"

namespace kestrel {

// Reads the request field (a JSON object; null or absent: nothing). Errors say what is wrong.
Expected<KvTransferParams> parse_kv_transfer_params(const nlohmann::json& params);

// The response's kv_transfer_params for a request whose KV a producer holds.
nlohmann::json kv_transfer_params_json(const KvTransferResult& held);

}  // namespace kestrel
