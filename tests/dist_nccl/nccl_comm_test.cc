// The NCCL communicator between real processes, one GPU each: the same exchange checks as the
// shared-memory and Gloo communicators (all-to-all(v) with empty and large parts, all-gather of
// bytes, reduce-scatter), plus the all-reduce and all-gather of floats. It needs two GPUs; on a
// machine with fewer it is skipped, saying how many it saw (CI has none; the device machine
// runs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/collective_checks.h"
#include "dist_nccl/nccl_comm.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

// GPUs, counted in a child: CUDA must not be initialised in a process that forks ranks after.
int gpus() {
  const pid_t pid = fork();
  if (pid == 0) _exit(std::min(cuda_device_count(), 100));
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

TEST(NcclComm, RanksOnTwoGpusExchangeAndReduce) {
  const int n = gpus();
  if (n < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << n;
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.error().message;
  const int port = (*server)->port();
  const auto status = test::run_ranks(
      2,
      [&](int rank) {
        auto store = StoreClient::connect("127.0.0.1", port, milliseconds(30000));
        if (!store.ok()) return 2;
        NcclCommOptions o;
        o.rank = rank;
        o.size = 2;
        o.device = rank;
        auto comm = NcclComm::connect(o, **store);
        if (!comm.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, comm.error().message.c_str());
          return 3;
        }
        std::vector<float> data = test::rank_data(rank, 1, 1000);
        if (!(*comm)->all_reduce_sum(data.data(), data.size()).ok()) return 4;
        const std::vector<float> a = test::rank_data(0, 1, 1000), b = test::rank_data(1, 1, 1000);
        for (size_t i = 0; i < data.size(); ++i)
          if (std::abs(data[i] - (a[i] + b[i])) > 1e-5f * (1.0f + std::abs(a[i] + b[i]))) return 5;
        std::vector<float> all(2000);
        if (!(*comm)->all_gather(a.data() + rank, 999, all.data()).ok()) return 6;
        if (all[0] != a[0] || all[999] != a[1]) return 7;
        return test::exercise_exchanges(**comm, /*exact_sum=*/false);
      },
      std::chrono::seconds(120));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

}  // namespace
}  // namespace kestrel
