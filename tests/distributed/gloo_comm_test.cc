// The Gloo communicator between real processes on loopback, rendezvousing through the store the
// parent serves: every rank gets the same all-reduced bits (within float rounding of the exact
// sum) and the exact all-gather; a rank that exits makes the others' collective fail within
// seconds, naming Gloo's error, instead of hanging.
#include "distributed/gloo_comm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fork_ranks.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;
using test::rank_data;

class GlooCommRanks : public ::testing::TestWithParam<int> {};

TEST_P(GlooCommRanks, AllRanksGetTheSameSumAndTheGather) {
  const int size = GetParam();
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.error().message;
  const int port = (*server)->port();
  const std::vector<size_t> sizes = {1, 5, 576, 7168, 100003};
  size_t total = 0;
  for (size_t n : sizes) total += n;
  test::SharedFloats results(total * size_t(size));
  const auto status = test::run_ranks(size, [&](int rank) {
    auto store = StoreClient::connect("127.0.0.1", port, milliseconds(10000));
    if (!store.ok()) return 2;
    GlooCommOptions o;
    o.rank = rank;
    o.size = size;
    o.timeout = milliseconds(10000);
    auto comm = GlooComm::connect(o, **store);
    if (!comm.ok()) {
      std::fprintf(stderr, "%s\n", comm.error().message.c_str());
      return 3;
    }
    size_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t n = sizes[i];
      std::vector<float> data = rank_data(rank, int(i), n);
      if (!(*comm)->all_reduce_sum(data.data(), n).ok()) return 4;
      std::memcpy(results.data() + size_t(rank) * total + at, data.data(), n * sizeof(float));
      at += n;
      // The gather is exact.
      std::vector<float> all(n * size_t(size));
      const std::vector<float> mine = rank_data(rank, 50 + int(i), n);
      if (!(*comm)->all_gather(mine.data(), n, all.data()).ok()) return 5;
      for (int r = 0; r < size; ++r)
        if (std::memcmp(all.data() + size_t(r) * n, rank_data(r, 50 + int(i), n).data(),
                        n * sizeof(float)) != 0)
          return 6;
    }
    return (*comm)->barrier().ok() ? 0 : 7;
  });
  for (int r = 0; r < size; ++r) ASSERT_EQ(status[size_t(r)], 0) << "rank " << r;
  // The same bits on every rank, and the sum within rounding of the float64 one.
  for (int r = 1; r < size; ++r)
    EXPECT_EQ(std::memcmp(results.data(), results.data() + size_t(r) * total, total * 4), 0)
        << "rank " << r << " differs from rank 0";
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<double> want(sizes[i], 0.0);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> v = rank_data(r, int(i), sizes[i]);
      for (size_t j = 0; j < v.size(); ++j) want[j] += v[j];
    }
    for (size_t j = 0; j < sizes[i]; ++j)
      ASSERT_NEAR(results.data()[at + j], want[j], 1e-5 * (1.0 + std::abs(want[j])))
          << "size " << sizes[i] << " element " << j;
    at += sizes[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCommRanks, ::testing::Values(1, 2, 3));

TEST(GlooComm, ARankThatExitsFailsTheOthersCollective) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const auto status = test::run_ranks(3, [&](int rank) {
    auto store = StoreClient::connect("127.0.0.1", port, milliseconds(10000));
    if (!store.ok()) return 2;
    GlooCommOptions o;
    o.rank = rank;
    o.size = 3;
    o.timeout = milliseconds(1500);
    auto comm = GlooComm::connect(o, **store);
    if (!comm.ok()) return 3;
    if (rank == 2) return 0;  // gone before the first collective
    std::vector<float> data(100000, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = (*comm)->all_reduce_sum(data.data(), data.size());
    if (s.ok()) s = (*comm)->all_reduce_sum(data.data(), data.size());
    if (s.ok()) return 4;
    if (s.message().find("Gloo all-reduce failed") == std::string::npos) return 5;
    return std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5) ? 0 : 6;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

TEST(GlooComm, NoStoreFailsTheConnectWithinTheTimeout) {
  int port = 0;
  {
    auto probe = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  auto store = StoreClient::connect("127.0.0.1", port, milliseconds(200));
  ASSERT_TRUE(store.ok());
  GlooCommOptions o;
  o.rank = 0;
  o.size = 2;
  o.timeout = milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = GlooComm::connect(o, **store);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.error().message.find("Gloo connect failed"), std::string::npos)
      << comm.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace kestrel
