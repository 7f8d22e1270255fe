// The collectives expert parallelism exchanges token rows with — all-to-all(v), all-gather of
// raw bytes — and reduce-scatter, on both communicators between real processes: shared memory
// (parts larger than a slot piece take several rounds, empty parts and all-empty exchanges
// included) and Gloo over loopback. Every rank must receive exactly the bytes each peer meant
// for it, and the reduce-scatter must give each rank its block of the sum (shared memory: the
// rank-order sum, bit for bit).
#include <gtest/gtest.h>

#include "distributed/collective_checks.h"
#include "distributed/gloo_comm.h"
#include "distributed/shm_comm.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

class ShmExchange : public ::testing::TestWithParam<int> {};

TEST_P(ShmExchange, EveryRankGetsWhatEachPeerSentIt) {
  const int size = GetParam();
  const std::string name = test::unique_shm_name();
  const auto status = test::run_ranks(size, [&](int rank) {
    ShmCommOptions o;
    o.name = name;
    o.rank = rank;
    o.size = size;
    o.slot_bytes = 2048;  // pieces of 512 bytes or less: the larger parts take many rounds
    o.timeout = milliseconds(10000);
    auto comm = ShmComm::connect(o);
    if (!comm.ok()) return 2;
    return test::exercise_exchanges(**comm, /*exact_sum=*/true);
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShmExchange, ::testing::Values(1, 2, 3, 4));

class GlooExchange : public ::testing::TestWithParam<int> {};

TEST_P(GlooExchange, EveryRankGetsWhatEachPeerSentIt) {
  const int size = GetParam();
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.error().message;
  const int port = (*server)->port();
  const auto status = test::run_ranks(size, [&](int rank) {
    auto store = StoreClient::connect("127.0.0.1", port, milliseconds(10000));
    if (!store.ok()) return 2;
    GlooCommOptions o;
    o.rank = rank;
    o.size = size;
    o.timeout = milliseconds(10000);
    auto comm = GlooComm::connect(o, **store);
    if (!comm.ok()) return 3;
    return test::exercise_exchanges(**comm, /*exact_sum=*/false);
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooExchange, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace kestrel
