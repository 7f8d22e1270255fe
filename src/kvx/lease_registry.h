// kvx/lease_registry.h — a producer's leases on the blocks of finished requests a consumer has
// yet to read (issue 21). A request that prefilled for a remote decode does not free its blocks
// when it finishes: the engine hands them to a lease, whose id and epoch (this engine's
// incarnation) go back to the client in kv_transfer_params. The consumer keeps the lease alive
// with heartbeats (each extends it to now + duration; vLLM-Ascend's MooncakeConnectorV2 does
// the same), then releases it once it has read. `release` answers whether the lease was still
// whole — never expired, released or forgotten since it was made — so the consumer knows the
// bytes it read were the prompt's and not a reused block's; a late or repeated release is
// answered "not whole" and changes nothing (idempotent). Expired and released leases hand their
// blocks (and a linear-attention model's held state slot) back to the engine thread, which frees
// them.
//
// Thread-safe: the engine thread creates leases and collects the blocks to free; the KV server's
// connection threads answer the control messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_cache_manager.h"
#include "kvx/lease_stats.h"

namespace kestrel {

struct LeaseInfo {
  uint64_t id = 0;
  uint64_t epoch = 0;
  std::chrono::milliseconds duration{0};
};

class LeaseRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  // `now` tells the time leases are measured in (tests pass a clock they move by hand).
  LeaseRegistry(uint64_t epoch, std::chrono::milliseconds duration,
                std::function<Clock::time_point()> now = Clock::now);

  // Engine thread: holds `blocks` until released or expired.
  LeaseInfo create(HeldKv blocks);
  // Engine thread: the blocks of leases released or expired since the last call.
  std::vector<HeldKv> take_freed();
  // When the next lease expires (Clock::time_point::max() without leases): the engine must
  // wake by then to free it.
  Clock::time_point next_expiry() const;
  // Runs when a lease is released (from a connection thread): wakes the engine thread.
  void set_wake(std::function<void()> wake);

  // The control messages ({"op": "heartbeat", "leases": [...]}, {"op": "release", "lease",
  // "epoch"}), from any thread.
  nlohmann::json handle(const nlohmann::json& message);

  LeaseStats stats() const;
  uint64_t epoch() const { return epoch_; }

 private:
  struct Lease {
    HeldKv blocks;
    Clock::time_point expires;
  };
  // Under mu_: moves expired leases to freed_.
  void sweep(Clock::time_point now);

  const uint64_t epoch_;
  const std::chrono::milliseconds duration_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::map<uint64_t, Lease> leases_;
  std::vector<HeldKv> freed_;
  uint64_t next_id_ = 1;
  LeaseStats stats_;
  std::function<void()> wake_;
};

// The KV server's control handler for a producer's leases (kvx/kv_server.h): `registry`'s
// answers, or an error when the instance holds none (null).
std::function<nlohmann::json(const nlohmann::json&)> lease_control(LeaseRegistry* registry);

}  // namespace kestrel
