// Collective latency between processes on this host, shared memory (distributed/shm_comm.h) beside
// Gloo over loopback TCP (distributed/gloo_comm.h): the all-reduce at the message sizes tensor
// parallelism sends (one decode token's hidden state, 576 floats for the default model and
// 7,168 for DeepSeek-V3, up to a prefill chunk's), and the all-to-all(v) expert parallelism
// sends at every MoE layer (the same number of bytes to each peer: one routed row of a
// 2,048-wide model up to a prefill chunk's rows). Forks `ranks` processes per transport; rank 0
// prints, per size, the median of `iters` timed collectives (after warm-up) and the bytes each
// rank sends per second.
//   collectives_bench [ranks=2] [iters=200]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "distributed/gloo_comm.h"
#include "distributed/shm_comm.h"
#include "distributed/store.h"

namespace {

kestrel::Expected<std::unique_ptr<kestrel::DeviceComm>> make_comm(const std::string& transport,
                                                                  const std::string& name,
                                                                  int store_port, int rank,
                                                                  int ranks) {
  if (transport == "shm") {
    kestrel::ShmCommOptions o;
    o.name = name;
    o.rank = rank;
    o.size = ranks;
    KASSIGN(auto c, kestrel::ShmComm::connect(o));
    return std::unique_ptr<kestrel::DeviceComm>(std::move(c));
  }
  KASSIGN(auto store,
          kestrel::StoreClient::connect("127.0.0.1", store_port, std::chrono::milliseconds(30000)));
  kestrel::GlooCommOptions o;
  o.rank = rank;
  o.size = ranks;
  KASSIGN(auto c, kestrel::GlooComm::connect(o, *store));
  return std::unique_ptr<kestrel::DeviceComm>(std::move(c));
}

// The median of `iters` timed calls of `op` (after 10 untimed), in microseconds; -1 on failure.
double median_us(int iters, const std::function<bool()>& op) {
  std::vector<double> us;
  for (int i = 0; i < iters + 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!op()) return -1;
    const double t =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 10) us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int run_rank(const std::string& transport, const std::string& name, int store_port, int rank,
             int ranks, int iters) {
  auto comm = make_comm(transport, name, store_port, rank, ranks);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.error().message.c_str());
    return 1;
  }
  kestrel::DeviceComm& c = **comm;
  if (rank == 0) std::printf("ranks %d, %s, median of %d\n", ranks, transport.c_str(), iters);
  for (size_t floats :
       {size_t(576), size_t(7168), size_t(32768), size_t(262144), size_t(1) << 21}) {
    std::vector<float> data(floats, 1.0f);
    const double med = median_us(iters, [&] { return c.all_reduce_sum(data.data(), floats).ok(); });
    if (med < 0) return 2;
    if (rank == 0)
      std::printf("  all-reduce %9zu floats (%8.1f KiB): %9.2f us, %6.2f GB/s per rank\n", floats,
                  double(floats) * 4 / 1024, med, double(floats) * 4 / med / 1e3);
  }
  for (size_t per_peer : {size_t(8) << 10, size_t(64) << 10, size_t(512) << 10, size_t(4) << 20}) {
    const std::vector<size_t> counts(size_t(ranks), per_peer);
    std::vector<char> send(per_peer * size_t(ranks), 1), recv(per_peer * size_t(ranks));
    const double med = median_us(
        iters, [&] { return c.all_to_all_v(send.data(), counts, recv.data(), counts).ok(); });
    if (med < 0) return 3;
    if (rank == 0)
      std::printf("  all-to-all %9zu bytes per peer (%8.1f KiB): %9.2f us, %6.2f GB/s per rank\n",
                  per_peer, double(per_peer) / 1024, med,
                  double(per_peer) * double(ranks - 1) / med / 1e3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  int rc = 0;
  for (const std::string transport : {"shm", "gloo"}) {
    const std::string name = "/kestrel-collectives-bench-" + std::to_string(getpid());
    auto server = kestrel::StoreServer::start("127.0.0.1", 0);
    if (!server.ok()) return 1;
    const int port = (*server)->port();
    std::vector<pid_t> pids;
    for (int r = 1; r < ranks; ++r) {
      const pid_t pid = fork();
      if (pid == 0) _exit(run_rank(transport, name, port, r, ranks, iters));
      pids.push_back(pid);
    }
    if (run_rank(transport, name, port, 0, ranks, iters) != 0) rc = 1;
    for (pid_t p : pids) {
      int st = 0;
      waitpid(p, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
    }
  }
  return rc;
}
