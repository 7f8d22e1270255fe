// proxy/lease_releaser.h — gives a prefill instance back the blocks of a prompt no decode will
// read (the client went away, or the decode stage failed before a decode instance took the
// request): a release of the prompt's KV lease, sent to the prefill's KV port straight away
// rather than waiting out the lease. A decode instance that did take the request releases the
// same lease too; releases are idempotent.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

#include "kvx/lease_client.h"

namespace kestrel::proxy {

class LeaseReleaser {
 public:
  // `kv_transfer_params`: a prefill's answer (anything else is ignored).
  void release(const nlohmann::json& kv_transfer_params);
  // Drops the producers' answers (nobody waits for them).
  void drain();

 private:
  LeaseClient client_;
  std::mutex mu_;
  uint64_t next_key_ = 0;
};

}  // namespace kestrel::proxy
