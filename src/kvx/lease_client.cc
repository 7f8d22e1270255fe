#include "kvx/lease_client.h"

#include <algorithm>

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

LeaseClient::LeaseClient(std::function<void()> wake) : wake_(std::move(wake)) {
  thread_ = std::thread([this] { run(); });
}

LeaseClient::~LeaseClient() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LeaseClient::watch(uint64_t key, RemoteLease lease) {
  {
    std::lock_guard lock(mu_);
    watched_[key] = std::move(lease);
    beat_now_ = true;  // the lease may be short: its first heartbeat goes out at once
  }
  cv_.notify_all();
}

void LeaseClient::release(uint64_t key) {
  {
    std::lock_guard lock(mu_);
    const auto it = watched_.find(key);
    if (it == watched_.end()) return;
    to_release_.emplace_back(key, std::move(it->second));
    watched_.erase(it);
  }
  cv_.notify_all();
}

std::vector<ReleaseResult> LeaseClient::take_released() {
  std::lock_guard lock(mu_);
  std::vector<ReleaseResult> out;
  out.swap(released_);
  return out;
}

size_t LeaseClient::num_watched() const {
  std::lock_guard lock(mu_);
  return watched_.size();
}

Expected<nlohmann::json> LeaseClient::call(const std::string& host, int port,
                                           const nlohmann::json& msg) {
  const std::string key = host + ":" + std::to_string(port);
  const Deadline deadline = deadline_in(kCallTimeout);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = conns_.find(key);
    if (it == conns_.end()) {
      KASSIGN(TcpConn c, TcpConn::connect(host, port, deadline));
      it = conns_.emplace(key, std::move(c)).first;
    }
    Status st = it->second.send_message(msg, deadline);
    Expected<nlohmann::json> reply =
        st.ok() ? it->second.recv_message(deadline) : Expected<nlohmann::json>(st.error());
    if (reply.ok()) return reply;
    // A pooled connection the producer closed (it restarted): one fresh try.
    conns_.erase(it);
    if (attempt == 1) return make_error("{}: {}", key, reply.error().message);
  }
  return make_error("{}: unreachable", key);
}

void LeaseClient::run() {
  // Heartbeats go out for every producer at a sixth of the shortest lease it granted.
  Clock::time_point next_beat = Clock::now();
  while (true) {
    std::deque<std::pair<uint64_t, RemoteLease>> releases;
    std::map<std::string, std::pair<RemoteLease, std::vector<uint64_t>>> beats;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next_beat, [&] { return stop_ || beat_now_ || !to_release_.empty(); });
      if (stop_) return;
      releases.swap(to_release_);
      if (beat_now_ || Clock::now() >= next_beat) {
        beat_now_ = false;
        auto period = std::chrono::milliseconds(1000);
        for (const auto& [key, l] : watched_) {
          auto& b = beats[l.host + ":" + std::to_string(l.port) + "/" + std::to_string(l.epoch)];
          b.first = l;
          b.second.push_back(l.lease);
          period = std::min(period, std::max(std::chrono::milliseconds(50), l.duration / 6));
        }
        next_beat = Clock::now() + period;
      }
    }
    for (auto& [key, l] : releases) {
      ReleaseResult r;
      r.key = key;
      auto reply =
          call(l.host, l.port, {{"op", "release"}, {"lease", l.lease}, {"epoch", l.epoch}});
      if (reply.ok()) {
        r.whole = reply->value("whole", false);
        if (!r.whole) r.error = "the producer no longer held the lease (expired, or restarted)";
      } else {
        r.error = reply.error().message;
      }
      std::function<void()> wake;
      {
        std::lock_guard lock(mu_);
        released_.push_back(std::move(r));
        wake = wake_;
      }
      if (wake) wake();
    }
    // A heartbeat that fails changes nothing: the release will say whether the lease held.
    for (auto& [producer, b] : beats)
      (void)call(b.first.host, b.first.port,
                 {{"op", "heartbeat"}, {"epoch", b.first.epoch}, {"leases", b.second}});
  }
}

}  // namespace kestrel
