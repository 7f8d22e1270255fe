// Runs a group's ranks as real processes for the dist tests: body(rank) in `size` forked
// children, each one's exit status back (0 = its checks passed, -1 = killed after `limit`, 100 +
// the signal that killed it), and a shared anonymous mapping the children can leave results in
// for the parent to compare, and the data each rank contributes.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kestrel::test {

inline std::vector<int> run_ranks(int size, const std::function<int(int)>& body,
                                  std::chrono::seconds limit = std::chrono::seconds(30)) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      // As `kestrel` itself (cli/main.cc): a write to a peer that is gone is an error, not a
      // SIGPIPE that kills the rank (a Gloo rank writing to one that exited).
      signal(SIGPIPE, SIG_IGN);
      _exit(body(r));
    }
    pids.push_back(pid);
  }
  std::vector<int> status(size_t(size), -1);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t r = 0; r < pids.size(); ++r) {
    int st = 0;
    bool killed = false;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &st, 0);
        killed = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    status[r] = killed ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
  }
  return status;
}

// Memory shared with the children forked after it: `floats` floats, zeroed.
class SharedFloats {
 public:
  explicit SharedFloats(size_t floats) : n_(floats) {
    p_ = static_cast<float*>(mmap(nullptr, n_ * sizeof(float), PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  }
  ~SharedFloats() { munmap(p_, n_ * sizeof(float)); }
  float* data() { return p_; }

 private:
  size_t n_;
  float* p_;
};

// Rank `rank`'s data for round `iter`: n normal floats, the same in every process.
inline std::vector<float> rank_data(int rank, int iter, size_t n) {
  std::mt19937 gen(uint32_t(rank * 7919 + iter));
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

inline std::string unique_shm_name() {
  static int n = 0;
  return "/kestrel-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

}  // namespace kestrel::test
