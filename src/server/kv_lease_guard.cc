#include "server/kv_lease_guard.h"

#include "server/protocol/kv_transfer_params.h"

namespace kestrel::server {

KvLeaseGuard::KvLeaseGuard(EngineClient* engine, const nlohmann::json& body) : engine_(engine) {
  if (engine_ == nullptr || !body.is_object() || !body.contains("kv_transfer_params")) return;
  auto parsed = parse_kv_transfer_params(body["kv_transfer_params"]);
  if (parsed.ok() && parsed->remote_prefill) params_ = std::move(*parsed);
}

KvLeaseGuard::~KvLeaseGuard() {
  if (params_) engine_->release_kv_refused(*params_);
}

}  // namespace kestrel::server
