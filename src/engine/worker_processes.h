// engine/worker_processes.h — the worker processes of a tensor-parallel group on this host
// (--distributed-executor-backend mp): forked children, one per rank after rank 0, that die with
// their parent (PR_SET_PDEATHSIG) and ignore SIGINT/SIGTERM (rank 0 tells them when to stop,
// after draining its requests). A monitor thread notices a child that exits while the group
// runs, records why, sets the group's abort flag (collectives waiting on it give up at once)
// and kills the other children, which cannot continue without it.
//
// Owned by the thread that spawned it; failure(), failed() and abort_flag() are thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace kestrel {

class WorkerProcesses {
 public:
  // Forks `count` children; child k runs body(k + 1) and exits with its result. Call it before
  // the process starts threads: a child has only the calling thread. `group_abort`, when given,
  // is set too when a child fails (a wider group's flag: distributed/shared_flag.h).
  static Expected<std::unique_ptr<WorkerProcesses>> spawn(int count,
                                                          const std::function<int(int)>& body,
                                                          std::atomic<bool>* group_abort = nullptr);
  // Kills the children still running (stop() with no grace).
  ~WorkerProcesses();
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Why the group failed (a child exited while it ran), once one did.
  std::optional<std::string> failure() const;
  // An error naming the failed rank once one has, or saying the wider group aborted once its
  // flag is set; for waits that poll.
  Status check() const;
  const std::atomic<bool>& abort_flag() const { return failed_; }
  pid_t pid(int rank) const { return pids_[size_t(rank - 1)]; }

  // Waits up to `grace` for the children to exit (they were told to), then kills the rest. An
  // exit from here on is not a failure.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

 private:
  WorkerProcesses(std::vector<pid_t> pids, std::atomic<bool>* group_abort);
  void monitor();
  // Under mu_: reaps `i` if it has exited; returns whether it has.
  bool reap(size_t i, int* status);

  std::vector<pid_t> pids_;  // rank r's at r - 1
  std::vector<bool> reaped_;
  mutable std::mutex mu_;
  std::optional<std::string> failure_;
  std::atomic<bool> failed_{false};
  std::atomic<bool>* group_abort_;
  std::atomic<bool> stopping_{false};
  std::thread monitor_;
};

}  // namespace kestrel
