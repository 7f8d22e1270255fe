// distributed/host_comm.h — the control channel of a worker group (issue 20): rank 0 (the leader)
// sends each step's bytes to every worker and gathers one reply from each, over ZeroMQ (ROUTER
// at the leader, a DEALER per worker named by its rank). Workers announce themselves when they
// connect; the leader's waits are bounded and check a liveness callback between polls, so a
// worker that dies fails the wait at once instead of at the timeout.
//
// Each side is owned by one thread: the leader by the engine thread, a worker by its process's
// main thread (each also runs a thread that watches its connections).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kestrel {

// Checked between polls while the leader waits: an error ends the wait with it.
using LivenessCheck = std::function<Status()>;

class HostCommLeader {
 public:
  // Listens on `endpoint` (a ZeroMQ address: ipc://PATH or tcp://HOST:PORT) for workers 1 ..
  // num_workers.
  static Expected<std::unique_ptr<HostCommLeader>> bind(const std::string& endpoint,
                                                        int num_workers);
  ~HostCommLeader();
  HostCommLeader(const HostCommLeader&) = delete;
  HostCommLeader& operator=(const HostCommLeader&) = delete;

  // Waits until every worker has connected; the error names the ranks still missing.
  Status wait_for_workers(std::chrono::milliseconds timeout, const LivenessCheck& alive);
  // The same bytes to every worker.
  Status broadcast(std::string_view bytes);
  // One message from each worker, indexed by rank - 1 (after wait_for_workers).
  Expected<std::vector<std::string>> gather(std::chrono::milliseconds timeout,
                                            const LivenessCheck& alive);
  // An error once a worker's connection has closed (it died, or its host stopped answering
  // ZeroMQ's heartbeats for 5 s), even while nobody waits. Thread-safe.
  Status check_connections() const;

 private:
  struct State;
  HostCommLeader(std::unique_ptr<State> state, std::string endpoint, int num_workers);
  // The next message and the rank that sent it; none at the deadline.
  Expected<std::optional<std::pair<int, std::string>>> receive(
      std::chrono::steady_clock::time_point deadline, const LivenessCheck& alive);
  std::unique_ptr<State> state_;
  std::string endpoint_;
  int num_workers_;
};

class HostCommWorker {
 public:
  // Connects to the leader at `endpoint` as `rank` (>= 1) and announces itself.
  static Expected<std::unique_ptr<HostCommWorker>> connect(const std::string& endpoint, int rank);
  ~HostCommWorker();
  HostCommWorker(const HostCommWorker&) = delete;
  HostCommWorker& operator=(const HostCommWorker&) = delete;

  // The leader's next message (blocks until it comes).
  Expected<std::string> receive();
  Status send(std::string_view bytes);

 private:
  struct State;
  explicit HostCommWorker(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kestrel
