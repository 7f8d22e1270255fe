// kvx/kv_transfer_config.h — `--kv-transfer-config` as the guides write it (vLLM's
// KVTransferConfig with vLLM-Ascend's Mooncake connectors), parsed into what Kestrel's pull
// connector needs (issue 21). Every Mooncake pull connector name selects the same connector;
// the layerwise (push) one is refused with the reason. Pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "base/status.h"

namespace kestrel {

enum class KvRole { kProducer, kConsumer, kBoth };
enum class KvLoadFailurePolicy { kRecompute, kFail };
// How block bytes move (kv_connector_extra_config.kv_transport): UCX where both sides have it,
// else TCP (auto); TCP only (the default: no dependency on the peer's build or the host's
// transports); UCX required.
enum class KvTransport { kAuto, kTcp, kUcx };

struct KvLayoutSpec {
  int dp_size = 1, tp_size = 1;
};

struct KvTransferConfig {
  std::string connector;  // as given (MooncakeConnectorV1, ...)
  KvRole role = KvRole::kBoth;
  // The first port of this instance's block: data-parallel rank d's TP rank t serves on
  // kv_port + d · tp_size + t (Mooncake's per-rank port blocks).
  int kv_port = 14579;
  std::string engine_id;  // empty: made up at start; each data-parallel rank appends _dp<rank>
  std::string kv_buffer_device = "cpu";
  std::optional<KvLayoutSpec> prefill, decode;  // kv_connector_extra_config.{prefill,decode}
  KvLoadFailurePolicy load_failure_policy = KvLoadFailurePolicy::kRecompute;
  KvTransport transport = KvTransport::kTcp;
  // Kestrel's own keys in kv_connector_extra_config: how long a producer holds a finished
  // request's blocks without a consumer's heartbeat (vLLM-Ascend's kv_lease_duration), and how
  // long a consumer waits for a load before it recomputes or fails the request.
  std::chrono::milliseconds lease_duration{30000};
  std::chrono::milliseconds load_timeout{30000};

  bool produces() const { return role != KvRole::kConsumer; }
  bool consumes() const { return role != KvRole::kProducer; }
};

// Parses the flag's JSON (an object; the caller has checked the keys' names and types). Errors
// name the key: an unknown connector or role, the layerwise connector, a port out of range, a
// policy other than fail or recompute.
Expected<KvTransferConfig> parse_kv_transfer_config(const std::string& json);

const char* kv_role_name(KvRole role);

}  // namespace kestrel
