// server/kv_lease_guard.h — on a decode instance (issue 21), a request that carries a prefill's
// lease (kv_transfer_params with do_remote_prefill) and is refused before it reaches the engine
// — a malformed field, an unknown model, a prompt too long, a full backlog — still releases the
// lease, so the prefill instance frees the prompt's blocks at once rather than when the lease
// lapses. A route holds the guard from the body's parse and disarms it when it hands the request
// to the engine (which releases on its own refusals and exits). Route thread only.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "engine/engine_client.h"

namespace kestrel::server {

class KvLeaseGuard {
 public:
  KvLeaseGuard(EngineClient* engine, const nlohmann::json& body);
  ~KvLeaseGuard();
  KvLeaseGuard(const KvLeaseGuard&) = delete;
  KvLeaseGuard& operator=(const KvLeaseGuard&) = delete;
  void disarm() { params_.reset(); }

 private:
  EngineClient* engine_;
  std::optional<KvTransferParams> params_;  // only with a producer's lease
};

}  // namespace kestrel::server
