#include "proxy/lease_releaser.h"

#include "server/protocol/kv_transfer_params.h"

namespace kestrel::proxy {

void LeaseReleaser::release(const nlohmann::json& kv_transfer_params) {
  auto params = parse_kv_transfer_params(kv_transfer_params);
  if (!params.ok() || !params->remote_prefill || params->remote_prefill->lease == 0) return;
  const RemotePrefillParams& r = *params->remote_prefill;
  drain();
  uint64_t key;
  {
    std::lock_guard lock(mu_);
    key = ++next_key_;
  }
  client_.watch(key, RemoteLease{r.host, r.port, r.lease, r.epoch, r.lease_duration});
  client_.release(key);
}

void LeaseReleaser::drain() {
  client_.take_released();
}

}  // namespace kestrel::proxy
