// The rendezvous store over ZeroMQ: values set by one client are read by others, reads wait for
// a value to be set, waits that run out name the keys still missing, and a client whose server
// is not there fails within its timeout instead of hanging. Its notice board: a notice reaches
// every other subscriber (not its sender), a subscriber that goes silent is announced lost to
// the rest, and subscribers notice a server that goes silent.
#include "distributed/store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
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

// What one subscriber received, for waiting on.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> notices;  // topic, value

  StoreSubscriber::Handler handler() {
    return [this](const std::string& topic, const std::vector<char>& value) {
      std::lock_guard lock(mu);
      notices.emplace_back(topic, std::string(value.begin(), value.end()));
      cv.notify_all();
    };
  }
  bool wait_for(const std::string& topic, const std::string& value, milliseconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] {
      for (const auto& n : notices)
        if (n.first == topic && n.second == value) return true;
      return false;
    });
  }
  size_t count(const std::string& topic) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& x : notices) n += x.first == topic ? 1 : 0;
    return n;
  }
};

// Pings every 20 ms; silent for a second is lost. The second is a margin for a loaded machine
// (CI runs tests side by side on two cores): a thread descheduled that long must not read as a
// lost peer in the tests that expect none.
NoticeTiming fast_timing() {
  NoticeTiming t;
  t.ping_interval = milliseconds(20);
  t.lost_after = milliseconds(1000);
  return t;
}

TEST(StoreNotices, ANoticeReachesEveryOtherSubscriberButNotItsSender) {
  auto server = StoreServer::start("ipc:///tmp/kestrel-store-test-" + std::to_string(getpid()));
  ASSERT_TRUE(server.ok()) << server.error().message;
  const std::string at = (*server)->endpoint();
  Inbox a, b, c;
  auto sa = StoreSubscriber::connect(at, "a", a.handler());
  auto sb = StoreSubscriber::connect(at, "b", b.handler());
  auto sc = StoreSubscriber::connect(at, "c", c.handler());
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok());
  // Published only once every member has subscribed, as the data-parallel group does.
  auto client = StoreClient::connect(at, milliseconds(3000));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)
                  ->wait({subscribed_key("a"), subscribed_key("b"), subscribed_key("c")},
                         milliseconds(3000))
                  .ok());
  ASSERT_TRUE((*sa)->publish("wave", {'7'}).ok());
  EXPECT_TRUE(b.wait_for("wave", "7", milliseconds(3000)));
  EXPECT_TRUE(c.wait_for("wave", "7", milliseconds(3000)));
  ASSERT_TRUE((*sb)->publish("wave", {'8'}).ok());
  EXPECT_TRUE(a.wait_for("wave", "8", milliseconds(3000)));
  EXPECT_TRUE(c.wait_for("wave", "8", milliseconds(3000)));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(a.wait_for("wave", "7", milliseconds(1))) << "the sender got its own notice";
  EXPECT_FALSE(b.wait_for("wave", "8", milliseconds(1))) << "the sender got its own notice";
}

TEST(StoreNotices, ASilentSubscriberIsAnnouncedLostToTheOthers) {
  auto server = StoreServer::start("tcp://127.0.0.1:*", fast_timing());
  ASSERT_TRUE(server.ok());
  const std::string at = (*server)->endpoint();
  Inbox a, b;
  auto sa = StoreSubscriber::connect(at, "rank0", a.handler(), fast_timing());
  auto sb = StoreSubscriber::connect(at, "rank1", b.handler(), fast_timing());
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto client = StoreClient::connect(at, milliseconds(3000));
  ASSERT_TRUE(
      (*client)->wait({subscribed_key("rank0"), subscribed_key("rank1")}, milliseconds(3000)).ok());
  // Alive and pinging past the silence that would count as lost: nobody is lost.
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(a.count(kLostTopic), 0u);
  sb->reset();  // rank1 stops answering
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(a.wait_for(kLostTopic, "rank1", milliseconds(6000)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(4000));
}

TEST(StoreNotices, SubscribersNoticeAServerThatGoesSilent) {
  auto server = StoreServer::start("tcp://127.0.0.1:*", fast_timing());
  ASSERT_TRUE(server.ok());
  const std::string at = (*server)->endpoint();
  Inbox a;
  auto sa = StoreSubscriber::connect(at, "rank1", a.handler(), fast_timing());
  ASSERT_TRUE(sa.ok());
  auto client = StoreClient::connect(at, milliseconds(3000));
  ASSERT_TRUE((*client)->wait({subscribed_key("rank1")}, milliseconds(3000)).ok());
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(a.count(kLostTopic), 0u);
  server->reset();
  EXPECT_TRUE(a.wait_for(kLostTopic, at, milliseconds(6000)));
}

}  // namespace
}  // namespace kestrel
