// The shared-memory communicator between real processes (fork): all-reduce and all-gather give
// every rank the same bits — the sum in rank order — for sizes below, at and across the slot
// size; a rank that dies makes the others' next collective fail within the timeout, naming it;
// ranks that disagree on the group's shape are refused.
#include "distributed/shm_comm.h"

#include "fork_ranks.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace kestrel {
namespace {

using test::rank_data;
using test::run_ranks;

std::string unique_name() {
  return test::unique_shm_name();
}

ShmCommOptions options(const std::string& name, int rank, int size, size_t slot_bytes) {
  ShmCommOptions o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.slot_bytes = slot_bytes;
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

class ShmCommRanks : public ::testing::TestWithParam<int> {};

TEST_P(ShmCommRanks, AllReduceAndAllGatherAreRankOrderedOnEveryRank) {
  const int size = GetParam();
  const std::string name = unique_name();
  constexpr size_t kSlot = 1024;  // 256 floats: the larger vectors take several chunks
  const std::vector<size_t> sizes = {1, 7, 255, 256, 257, 1000, 4099};
  const auto status = run_ranks(size, [&](int rank) {
    auto comm = ShmComm::connect(options(name, rank, size, kSlot));
    if (!comm.ok()) return 2;
    if ((*comm)->rank() != rank || (*comm)->size() != size) return 3;
    for (int iter = 0; iter < 20; ++iter) {
      const size_t n = sizes[size_t(iter) % sizes.size()];
      std::vector<float> data = rank_data(rank, iter, n);
      if (!(*comm)->all_reduce_sum(data.data(), n).ok()) return 4;
      std::vector<float> want = rank_data(0, iter, n);
      for (int r = 1; r < size; ++r) {
        const std::vector<float> other = rank_data(r, iter, n);
        for (size_t i = 0; i < n; ++i) want[i] += other[i];
      }
      if (std::memcmp(data.data(), want.data(), n * sizeof(float)) != 0) return 5;
      const std::vector<float> mine = rank_data(rank, 100 + iter, n);
      std::vector<float> gathered(n * size_t(size));
      if (!(*comm)->all_gather(mine.data(), n, gathered.data()).ok()) return 6;
      for (int r = 0; r < size; ++r)
        if (std::memcmp(gathered.data() + size_t(r) * n, rank_data(r, 100 + iter, n).data(),
                        n * sizeof(float)) != 0)
          return 7;
      if (!(*comm)->barrier().ok()) return 8;
    }
    return 0;
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShmCommRanks, ::testing::Values(1, 2, 3, 4));

TEST(ShmComm, ADeadRankFailsTheNextCollectiveNamingIt) {
  const std::string name = unique_name();
  const auto status = run_ranks(3, [&](int rank) {
    ShmCommOptions o = options(name, rank, 3, 1024);
    o.timeout = std::chrono::milliseconds(300);
    auto comm = ShmComm::connect(o);
    if (!comm.ok()) return 2;
    if (rank == 2) return 0;  // leaves without taking part
    std::vector<float> data(10, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = (*comm)->all_reduce_sum(data.data(), data.size());
    const auto waited = std::chrono::steady_clock::now() - t0;
    if (s.ok()) return 3;
    if (s.message().find("rank 2 did not reach") == std::string::npos) return 4;
    return waited < std::chrono::seconds(3) ? 0 : 5;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

TEST(ShmComm, RanksThatDisagreeOnTheGroupAreRefused) {
  const std::string name = unique_name();
  const auto status = run_ranks(2, [&](int rank) {
    ShmCommOptions o = options(name, rank, 2, rank == 0 ? 1024 : 2048);
    o.timeout = std::chrono::milliseconds(500);
    auto comm = ShmComm::connect(o);
    if (rank == 0) return comm.ok() ? 3 : 0;  // rank 1 never attaches
    if (comm.ok()) return 4;
    return comm.error().message.find("no segment of") != std::string::npos ? 0 : 5;
  });
  EXPECT_EQ(status[0], 0);
  EXPECT_EQ(status[1], 0);
  // Rank 0 removed the segment of the group that did not form.
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
}

TEST(ShmComm, BadOptionsAreErrors) {
  EXPECT_FALSE(ShmComm::connect(options("/x", 2, 2, 1024)).ok());
  EXPECT_FALSE(ShmComm::connect(options("no-slash", 0, 1, 1024)).ok());
  EXPECT_FALSE(ShmComm::connect(options("/x", 0, 1, 0)).ok());
}

}  // namespace
}  // namespace kestrel
