#include "engine/worker_processes.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "base/logging.h"

namespace kestrel {

namespace {

constexpr auto kMonitorInterval = std::chrono::milliseconds(10);

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

Expected<std::unique_ptr<WorkerProcesses>> WorkerProcesses::spawn(
    int count, const std::function<int(int)>& body, std::atomic<bool>* group_abort) {
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int k = 0; k < count; ++k) {
    std::fflush(nullptr);  // nothing buffered is written twice
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      for (pid_t p : pids) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
      return make_error("cannot start worker rank {}: fork: {}", k + 1, std::strerror(err));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the parent died before the line above
      // Rank 0 decides when the group stops (a Ctrl-C reaches the whole process group, and
      // rank 0 drains its requests first); the workers die with it at the latest.
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, SIG_IGN);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      const int rc = body(k + 1);
      std::fflush(nullptr);
      spdlog::default_logger()->flush();
      _exit(rc);  // the parent's state (threads, atexit handlers) is not this process's
    }
    pids.push_back(pid);
  }
  return std::unique_ptr<WorkerProcesses>(new WorkerProcesses(std::move(pids), group_abort));
}

WorkerProcesses::WorkerProcesses(std::vector<pid_t> pids, std::atomic<bool>* group_abort)
    : pids_(std::move(pids)), reaped_(pids_.size(), false), group_abort_(group_abort) {
  monitor_ = std::thread([this] { monitor(); });
}

WorkerProcesses::~WorkerProcesses() {
  stop(std::chrono::milliseconds(0));
}

bool WorkerProcesses::reap(size_t i, int* status) {
  if (reaped_[i]) return true;
  if (waitpid(pids_[i], status, WNOHANG) != pids_[i]) return false;
  reaped_[i] = true;
  return true;
}

void WorkerProcesses::monitor() {
  while (!stopping_.load()) {
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < pids_.size() && !failure_; ++i) {
        if (reaped_[i]) continue;
        int status = 0;
        if (!reap(i, &status) || stopping_.load()) continue;
        failure_ =
            fmt::format("worker rank {} (pid {}) {}", i + 1, pids_[i], describe_exit(status));
        KLOG_ERROR("{}; stopping the tensor-parallel group", *failure_);
        failed_.store(true);
        if (group_abort_ != nullptr) group_abort_->store(true);
        for (size_t j = 0; j < pids_.size(); ++j)
          if (!reaped_[j]) kill(pids_[j], SIGKILL);
      }
    }
    std::this_thread::sleep_for(kMonitorInterval);
  }
}

std::optional<std::string> WorkerProcesses::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

Status WorkerProcesses::check() const {
  if (auto f = failure()) return make_error("{}", *f);
  // A worker may wait in a collective with a rank of the wider group that failed (Gloo gives up
  // only at its timeout): waiting for that worker's answer is pointless once the group aborted.
  if (group_abort_ != nullptr && group_abort_->load())
    return make_error("the group was aborted (another of its ranks failed or stopped)");
  return Status::Ok();
}

void WorkerProcesses::stop(std::chrono::milliseconds grace) {
  if (stopping_.exchange(true)) return;
  monitor_.join();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < pids_.size(); ++i) {
    int status = 0;
    while (!reap(i, &status)) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids_[i], SIGKILL);
        waitpid(pids_[i], &status, 0);
        reaped_[i] = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace kestrel
