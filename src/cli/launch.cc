// kestrel launch — the guides' launch_online_dp.py: starts one server per local data-parallel
// rank through the 7-argument run_dp_template.sh contract (devices, port, dp size, dp rank, dp
// address, dp rpc port, tp size), each on its share of this machine's cores where the original
// hands out NPU ids. Unlike the original it forwards SIGINT/SIGTERM to its children, stops the
// others when one fails, and exits non-zero then.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"

namespace kestrel::cli {

namespace {

struct LaunchArgs {
  int dp_size = 0;
  int tp_size = 1;
  int dp_size_local = -1;  // -1: dp_size
  int dp_rank_start = 0;
  std::string dp_address;
  std::string dp_rpc_port = "12345";
  int vllm_start_port = 9000;
  std::string template_path = "./run_dp_template.sh";
};

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

// Local rank i's share: a contiguous run of the allowed CPUs (shared round-robin when there are
// more ranks than CPUs).
std::vector<int> cpus_of(int i, int ranks, const std::vector<int>& cpus) {
  const int n = int(cpus.size());
  const int share = std::max(1, n / ranks);
  std::vector<int> out;
  for (int k = 0; k < share; ++k) out.push_back(cpus[size_t((i * share + k) % n)]);
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

// Waits until every process of group `pgid` is gone: the servers drain within their own
// shutdown timeout; after this grace what is left is killed.
void wait_for_group(pid_t pgid) {
  constexpr int kGraceMs = 60000;
  for (int ms = 0; kill(-pgid, 0) == 0; ms += 10) {
    if (ms >= kGraceMs) {
      kill(-pgid, SIGKILL);
      break;
    }
    usleep(10000);
  }
}

int launch(const LaunchArgs& a) {
  const int local = a.dp_size_local < 0 ? a.dp_size : a.dp_size_local;
  if (a.dp_rank_start + local > a.dp_size) {
    std::fprintf(stderr, "kestrel launch: error: ranks %d..%d on this node exceed --dp-size %d\n",
                 a.dp_rank_start, a.dp_rank_start + local - 1, a.dp_size);
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(a.template_path, ec)) {
    std::fprintf(stderr, "kestrel launch: error: template %s not found\n", a.template_path.c_str());
    return 2;
  }
  // Signals are taken synchronously below; children get the default mask back.
  sigset_t handled, old;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&handled, s);
  sigprocmask(SIG_BLOCK, &handled, &old);

  const std::vector<int> cpus = allowed_cpus();
  std::map<pid_t, int> children;  // pid → dp rank
  for (int i = 0; i < local; ++i) {
    const int rank = a.dp_rank_start + i;
    const std::vector<int> mine = cpus_of(i, local, cpus);
    std::vector<std::string> args = {"bash",
                                     a.template_path,
                                     join(mine),
                                     std::to_string(a.vllm_start_port + i),
                                     std::to_string(a.dp_size),
                                     std::to_string(rank),
                                     a.dp_address,
                                     a.dp_rpc_port,
                                     std::to_string(a.tp_size)};
    std::string line;
    for (const auto& s : args) line += (line.empty() ? "" : " ") + s;
    KLOG_INFO("data-parallel rank {} on CPUs {}: {}", rank, join(mine), line);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      KLOG_ERROR("cannot start rank {}: {}", rank, std::strerror(errno));
      break;
    }
    if (pid == 0) {
      // Its own process group, so a signal reaches the template's shell and the server it runs.
      setpgid(0, 0);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : mine) CPU_SET(c, &set);
      sched_setaffinity(0, sizeof(set), &set);  // the rank's threads default to its share
      signal(SIGPIPE, SIG_DFL);                 // the template's shell, as any shell's
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      execvp("bash", argv.data());
      std::fprintf(stderr, "kestrel launch: cannot run bash: %s\n", std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);  // also here: no signal may reach the group before it exists
    children.emplace(pid, rank);
  }
  const bool all_started = int(children.size()) == local;
  bool failed = !all_started, stopping = !all_started;
  if (!all_started)
    for (const auto& [pid, rank] : children) kill(-pid, SIGTERM);
  while (!children.empty()) {
    siginfo_t info;
    const int sig = sigwaitinfo(&handled, &info);
    if (sig == SIGINT || sig == SIGTERM) {
      KLOG_INFO("signal {}: stopping {} rank(s)", sig, children.size());
      stopping = true;
      for (const auto& [pid, rank] : children) kill(-pid, sig);
      continue;
    }
    if (sig != SIGCHLD) continue;
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      const auto it = children.find(pid);
      if (it == children.end()) continue;
      const int rank = it->second;
      children.erase(it);
      // A shell killed by the forwarded signal while its server drains: wait for the server.
      if (stopping) wait_for_group(pid);
      const bool forwarded = stopping && WIFSIGNALED(status) &&
                             (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT);
      const bool clean = (WIFEXITED(status) && WEXITSTATUS(status) == 0) || forwarded;
      if (clean && stopping) continue;
      if (clean) {
        KLOG_INFO("data-parallel rank {} (pid {}) exited", rank, pid);
        continue;
      }
      KLOG_ERROR("data-parallel rank {} (pid {}) {}{}", rank, pid, describe(status),
                 stopping ? "" : "; stopping the other ranks");
      failed = true;
      if (!stopping) {
        stopping = true;
        for (const auto& [other, r] : children) kill(-other, SIGTERM);
      }
    }
  }
  return failed ? 1 : 0;
}

int run_launch(int argc, char** argv) {
  LaunchArgs a;
  CLI::App app{
      "Start one `kestrel serve` per local data-parallel rank through run_dp_template.sh, as "
      "the guides' launch_online_dp.py.",
      "kestrel launch"};
  app.add_option("--dp-size", a.dp_size, "data-parallel ranks over all nodes")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--tp-size", a.tp_size, "tensor-parallel ranks per data-parallel rank")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--dp-size-local", a.dp_size_local, "ranks on this node (default: --dp-size)")
      ->check(CLI::Range(-1, 1 << 16));
  app.add_option("--dp-rank-start", a.dp_rank_start, "this node's first rank")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--dp-address", a.dp_address, "address of data-parallel rank 0's node")
      ->required();
  app.add_option("--dp-rpc-port", a.dp_rpc_port, "its data-parallel RPC port");
  app.add_option("--vllm-start-port", a.vllm_start_port,
                 "HTTP port of the first local rank; rank i listens on it + i")
      ->check(CLI::Range(1, 65535));
  app.add_option("--template", a.template_path,
                 "the script given the 7 arguments (Kestrel's; default ./run_dp_template.sh)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_log_level("info");
  return launch(a);
}

KESTREL_COMMAND("launch",
                "start one server per local data-parallel rank (the guides' launch_online_dp.py)",
                run_launch);

}  // namespace

}  // namespace kestrel::cli
