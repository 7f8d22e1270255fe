#include "kvx/lease_registry.h"

namespace kestrel {

LeaseRegistry::LeaseRegistry(uint64_t epoch, std::chrono::milliseconds duration,
                             std::function<Clock::time_point()> now)
    : epoch_(epoch), duration_(duration), now_(std::move(now)) {}

LeaseInfo LeaseRegistry::create(HeldKv blocks) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  leases_.emplace(id, Lease{std::move(blocks), now_() + duration_});
  ++stats_.created;
  return LeaseInfo{id, epoch_, duration_};
}

void LeaseRegistry::sweep(Clock::time_point now) {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    freed_.push_back(std::move(it->second.blocks));
    it = leases_.erase(it);
    ++stats_.expired;
  }
}

std::vector<HeldKv> LeaseRegistry::take_freed() {
  std::lock_guard lock(mu_);
  sweep(now_());
  std::vector<HeldKv> out;
  out.swap(freed_);
  return out;
}

LeaseRegistry::Clock::time_point LeaseRegistry::next_expiry() const {
  std::lock_guard lock(mu_);
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [id, lease] : leases_) next = std::min(next, lease.expires);
  return next;
}

void LeaseRegistry::set_wake(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wake_ = std::move(wake);
}

nlohmann::json LeaseRegistry::handle(const nlohmann::json& m) {
  const std::string op = m.value("op", "");
  std::function<void()> wake;
  nlohmann::json reply;
  {
    std::lock_guard lock(mu_);
    const Clock::time_point now = now_();
    // A lease past its time is gone before anything else is answered.
    sweep(now);
    if (op == "heartbeat") {
      ++stats_.heartbeats;
      // Leases of another incarnation, or gone, are not extended: their answer says which.
      std::vector<uint64_t> gone;
      const bool ours = m.value("epoch", uint64_t(0)) == epoch_;
      for (const auto& id : m.value("leases", std::vector<uint64_t>{})) {
        auto it = ours ? leases_.find(id) : leases_.end();
        if (it == leases_.end()) {
          gone.push_back(id);
          continue;
        }
        it->second.expires = std::max(it->second.expires, now + duration_);
      }
      reply = {{"op", "ok"}, {"gone", gone}};
    } else if (op == "release") {
      const auto it = m.value("epoch", uint64_t(0)) == epoch_
                          ? leases_.find(m.value("lease", uint64_t(0)))
                          : leases_.end();
      const bool whole = it != leases_.end();
      if (whole) {
        freed_.push_back(std::move(it->second.blocks));
        leases_.erase(it);
        ++stats_.released;
        wake = wake_;
      }
      reply = {{"op", "released"}, {"whole", whole}};
    } else {
      reply = {{"op", "error"}, {"error", "unknown request '" + op + "'"}};
    }
    stats_.active = int64_t(leases_.size());
  }
  if (wake) wake();
  return reply;
}

LeaseStats LeaseRegistry::stats() const {
  std::lock_guard lock(mu_);
  LeaseStats s = stats_;
  s.active = int64_t(leases_.size());
  return s;
}

std::function<nlohmann::json(const nlohmann::json&)> lease_control(LeaseRegistry* registry) {
  return [registry](const nlohmann::json& m) -> nlohmann::json {
    if (registry == nullptr) return {{"op", "error"}, {"error", "this instance holds no leases"}};
    return registry->handle(m);
  };
}

}  // namespace kestrel
