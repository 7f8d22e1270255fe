// The rendezvous store over ZeroMQ: values set by one client are read by others, reads wait for
// a value to be set, waits that run out name the keys still missing, and a client whose server
// is not there fails within its timeout instead of hanging.
#include "dist/store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace kestrel {
namespace {

using std::chrono::milliseconds;

TEST(Store, SetGetAndWaitAcrossClients) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.error().message;
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  auto a = StoreClient::connect("127.0.0.1", port, milliseconds(3000));
  auto b = StoreClient::connect("127.0.0.1", port, milliseconds(3000));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->set("rank0/addr", {'x', '\0', 'y'}).ok());
  auto got = (*b)->get("rank0/addr");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, (std::vector<char>{'x', '\0', 'y'}));
  ASSERT_TRUE((*a)->set("rank0/addr", {'z'}).ok());  // replaced
  EXPECT_EQ(*(*b)->get("rank0/addr"), std::vector<char>{'z'});

  // A read of a key set later waits for it.
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE((*a)->set("rank1/addr", {'1'}).ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = (*b)->get("rank1/addr");
  later.join();
  ASSERT_TRUE(waited.ok()) << waited.error().message;
  EXPECT_EQ(*waited, std::vector<char>{'1'});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(90));
  EXPECT_TRUE((*b)->wait({"rank0/addr", "rank1/addr"}, milliseconds(100)).ok());
}

TEST(Store, AWaitThatRunsOutNamesTheMissingKeys) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto c = StoreClient::connect("127.0.0.1", (*server)->port(), milliseconds(2000));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->set("present", {'p'}).ok());
  const Status s = (*c)->wait({"present", "rank3/addr"}, milliseconds(150));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("still waiting for rank3/addr"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("present,"), std::string::npos) << s.message();
}

TEST(Store, NoServerFailsWithinTheTimeout) {
  // A port that was just free: nothing listens there.
  int port = 0;
  {
    auto probe = StoreServer::start("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  auto c = StoreClient::connect("127.0.0.1", port, milliseconds(200));
  ASSERT_TRUE(c.ok());
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = (*c)->set("k", {'v'});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no answer to set 'k' within 200 ms"), std::string::npos)
      << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
}

TEST(Store, ABadListenAddressIsAnError) {
  EXPECT_FALSE(StoreServer::start("not-an-address", 0).ok());
}

}  // namespace
}  // namespace kestrel
