// kvx/lease_client.h — a consumer's side of the producers' leases (issue 21): for every request
// that waits on a remote prefill it keeps the producer's lease alive with heartbeats (every sixth
// of the lease, from the moment the request arrives), and at the end releases it exactly once —
// after a load, to learn whether the lease was still whole (if not, the bytes read may be
// another prompt's and are not used), and on every other exit (abort, rejection, failure) so
// the producer frees at once. The requests of a stop-and-go consumer never wait on a dead
// producer: the network calls run on the client's own thread, each bounded by a timeout, and
// their answers come back through take_released().
//
// Thread-safe: the engine thread watches, releases and collects; the client's thread talks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvx/tcp.h"

namespace kestrel {

// A producer's lease: its rank 0 at host:port, the lease and the producer's epoch.
struct RemoteLease {
  std::string host;
  int port = 0;
  uint64_t lease = 0;
  uint64_t epoch = 0;
  std::chrono::milliseconds duration{30000};
};

struct ReleaseResult {
  uint64_t key = 0;
  bool whole = false;  // the lease was intact until released (false also when unreachable)
  std::string error;   // why not, when known
};

class LeaseClient {
 public:
  // `wake` runs (on the client's thread) when a release is answered.
  explicit LeaseClient(std::function<void()> wake = {});
  ~LeaseClient();
  LeaseClient(const LeaseClient&) = delete;
  LeaseClient& operator=(const LeaseClient&) = delete;

  // Heartbeats `lease` under `key` (a request handle) until released.
  void watch(uint64_t key, RemoteLease lease);
  // Stops the heartbeats and releases the lease; the answer comes back under `key`. A key
  // released twice, or never watched, is ignored.
  void release(uint64_t key);
  std::vector<ReleaseResult> take_released();
  size_t num_watched() const;

  static constexpr std::chrono::seconds kCallTimeout{5};

 private:
  void run();
  // One call to the producer at host:port (a connection kept per producer, dropped on error).
  Expected<nlohmann::json> call(const std::string& host, int port, const nlohmann::json& msg);

  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, RemoteLease> watched_;
  std::deque<std::pair<uint64_t, RemoteLease>> to_release_;
  std::vector<ReleaseResult> released_;
  bool beat_now_ = false;  // a lease was just watched
  bool stop_ = false;
  std::map<std::string, TcpConn> conns_;  // the client thread's
  std::thread thread_;
};

}  // namespace kestrel
