// Groups that meet through the rendezvous store: members that all post one host address share
// memory, members on different addresses (127.0.0.1 and 127.0.0.2 are both loopback) use Gloo
// bound to their own address, either way the exchange works; a member that never comes makes
// the others fail naming what is missing; the local address toward a peer is the route's source
// (or VLLM_HOST_IP).
#include "distributed/group_comm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "distributed/gloo_comm.h"
#include "distributed/local_address.h"
#include "distributed/shm_comm.h"
#include "fork_ranks.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

// 0 when rank's group formed as `want_shm` says and a ring exchange arrived intact.
int join_and_exchange(const std::string& endpoint, int rank, int size, const std::string& host,
                      bool want_shm) {
  auto store = StoreClient::connect(endpoint, milliseconds(10000));
  if (!store.ok()) return 2;
  GroupCommOptions o;
  o.group = "ep/t0";
  o.rank = rank;
  o.size = size;
  o.host = host;
  o.timeout = milliseconds(10000);
  o.label = "expert-parallel";
  auto comm = connect_group_comm(o, **store);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.error().message.c_str());
    return 3;
  }
  const bool is_shm = dynamic_cast<ShmComm*>(comm->get()) != nullptr;
  const bool is_gloo = dynamic_cast<GlooComm*>(comm->get()) != nullptr;
  if (is_shm != want_shm || is_gloo == want_shm) return 4;
  // Each rank sends its right neighbour 3 floats naming itself.
  std::vector<size_t> send(static_cast<size_t>(size), 0), recv(static_cast<size_t>(size), 0);
  send[size_t((rank + 1) % size)] = 3 * sizeof(float);
  recv[size_t((rank + size - 1) % size)] = 3 * sizeof(float);
  const float mine[3] = {float(rank), float(rank) + 0.5f, -float(rank)};
  float got[3] = {};
  if (!(*comm)->all_to_all_v(mine, send, got, recv).ok()) return 5;
  const int left = (rank + size - 1) % size;
  return got[0] == float(left) && got[1] == float(left) + 0.5f && got[2] == -float(left) ? 0 : 6;
}

TEST(GroupComm, MembersOnOneHostShareMemory) {
  auto server = StoreServer::start("tcp://127.0.0.1:*");
  ASSERT_TRUE(server.ok());
  const std::string at = (*server)->endpoint();
  const auto status = test::run_ranks(
      3, [&](int rank) { return join_and_exchange(at, rank, 3, "127.0.0.1", true); });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

TEST(GroupComm, MembersOnDifferentAddressesUseGlooBoundToTheirOwn) {
  auto server = StoreServer::start("tcp://127.0.0.1:*");
  ASSERT_TRUE(server.ok());
  const std::string at = (*server)->endpoint();
  const auto status = test::run_ranks(3, [&](int rank) {
    return join_and_exchange(at, rank, 3, rank == 2 ? "127.0.0.2" : "127.0.0.1", false);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(status[size_t(r)], 0) << "rank " << r;
}

TEST(GroupComm, AMemberThatNeverComesFailsTheOthersNamingIt) {
  auto server = StoreServer::start("tcp://127.0.0.1:*");
  ASSERT_TRUE(server.ok());
  auto store = StoreClient::connect((*server)->endpoint(), milliseconds(2000));
  ASSERT_TRUE(store.ok());
  GroupCommOptions o;
  o.group = "dp-sync";
  o.rank = 0;
  o.size = 2;
  o.connect_timeout = milliseconds(300);
  o.label = "data-parallel";
  auto comm = connect_group_comm(o, **store);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.error().message.find("data-parallel group: not every member joined"),
            std::string::npos)
      << comm.error().message;
  EXPECT_NE(comm.error().message.find("dp-sync/host/1"), std::string::npos) << comm.error().message;
}

TEST(LocalAddress, TheRoutesSourceOrTheInterfaceOrVllmHostIp) {
  auto lo = local_address_toward("127.0.0.1");
  ASSERT_TRUE(lo.ok()) << lo.error().message;
  EXPECT_EQ(*lo, "127.0.0.1");
  EXPECT_FALSE(local_address_toward("no-such-host.invalid").ok());
  // GLOO_SOCKET_IFNAME names the interface (the first of a list), whatever the route.
  AddressHints hints;
  hints.socket_ifnames = "lo,eth9";
  EXPECT_EQ(*local_address_toward("no-such-host.invalid", hints), "127.0.0.1");
  hints.socket_ifnames = "nosuchif0";
  auto missing = local_address_toward("127.0.0.1", hints);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("GLOO_SOCKET_IFNAME=nosuchif0: network interface "
                                         "nosuchif0 does not exist"),
            std::string::npos)
      << missing.error().message;
  // VLLM_HOST_IP names the address outright.
  hints.host_ip = "10.9.8.7";
  EXPECT_EQ(*local_address_toward("127.0.0.1", hints), "10.9.8.7");
}

}  // namespace
}  // namespace kestrel
