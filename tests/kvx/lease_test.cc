// Leases between a producer's registry (served by its KV server's control handler) and a
// consumer's lease client over loopback: a released lease answers whole and frees its blocks
// once; a second release, a release after expiry, and a release under another epoch (a
// restarted producer) answer not whole and free nothing more; heartbeats keep a short lease
// alive past its duration, and without them it expires and its blocks come back; an unreachable
// producer gives a clear error instead of hanging; the flag's JSON parses as the guides write it.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "kvx/kv_server.h"
#include "kvx/kv_transfer_config.h"
#include "kvx/lease_client.h"
#include "kvx/lease_registry.h"
#include "kvx/ucx_transport.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

// A clock the test moves by hand: leases then expire exactly when the test says, however the
// machine schedules the threads.
struct ManualClock {
  std::shared_ptr<std::atomic<int64_t>> ms = std::make_shared<std::atomic<int64_t>>(0);
  LeaseRegistry::Clock::time_point now() const {
    return LeaseRegistry::Clock::time_point(milliseconds(ms->load()));
  }
  void advance(milliseconds d) { ms->fetch_add(d.count()); }
};

// A producer: its registry behind a KV server (rank 0) on a free port.
struct Producer {
  LeaseRegistry registry;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(4 * 1024);
  std::unique_ptr<KvServer> server;
  Producer(uint64_t epoch, milliseconds lease,
           std::function<LeaseRegistry::Clock::time_point()> now = LeaseRegistry::Clock::now)
      : registry(epoch, lease, std::move(now)) {
    KVMemoryView m;
    m.base = bytes.data();
    m.num_blocks = 4;
    m.planes = 1;
    m.block_bytes = 1024;
    auto s = KvServer::start("127.0.0.1", 0, m,
                             describe_kv_rank(m, "p", epoch, "k", 0, 1, 0, 1, 1, false),
                             [this](const nlohmann::json& msg) { return registry.handle(msg); });
    EXPECT_TRUE(s.ok());
    if (s.ok()) server = std::move(*s);
  }
  RemoteLease lease_for(const LeaseInfo& info) const {
    return RemoteLease{"127.0.0.1", server->port(), info.id, info.epoch, info.duration};
  }
  // Waits (a bounded poll) until the registry has answered more than `seen` heartbeats.
  bool heartbeat_after(int64_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (registry.stats().heartbeats <= seen)
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      else
        std::this_thread::sleep_for(milliseconds(1));
    return true;
  }
};

ReleaseResult wait_release(LeaseClient& c, milliseconds limit = milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c.take_released();
    if (!r.empty()) return r[0];
    std::this_thread::sleep_for(milliseconds(2));
  }
  return ReleaseResult{0, false, "the test gave up waiting"};
}

TEST(Leases, AReleaseIsWholeOnceAndFreesTheBlocksOnce) {
  Producer p(11, milliseconds(30000));
  const LeaseInfo info = p.registry.create(HeldKv{{{3, 4, 5}}});
  EXPECT_EQ(info.epoch, 11u);
  LeaseClient client;
  client.watch(1, p.lease_for(info));
  client.release(1);
  ReleaseResult r = wait_release(client);
  EXPECT_EQ(r.key, 1u);
  EXPECT_TRUE(r.whole) << r.error;
  auto freed = p.registry.take_freed();
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0], (HeldKv{{{3, 4, 5}}}));
  // Again (a duplicate from a retrying consumer): not whole, nothing freed twice.
  client.watch(2, p.lease_for(info));
  client.release(2);
  r = wait_release(client);
  EXPECT_FALSE(r.whole);
  EXPECT_TRUE(p.registry.take_freed().empty());
  client.release(2);   // released twice: ignored
  client.release(99);  // never watched: ignored
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(client.take_released().empty());
  EXPECT_EQ(p.registry.stats().released, 1);
}

TEST(Leases, HeartbeatsKeepAShortLeaseAliveAndWithoutThemItExpires) {
  ManualClock clock;
  Producer p(12, milliseconds(300), [clock] { return clock.now(); });
  const LeaseInfo kept = p.registry.create(HeldKv{{{1}}});
  const LeaseInfo lapsed = p.registry.create(HeldKv{{{2}}});
  LeaseClient client;
  client.watch(1, p.lease_for(kept));
  // Three lease durations pass, in steps shorter than one, each followed by a heartbeat.
  for (int step = 0; step < 5; ++step) {
    clock.advance(milliseconds(180));
    // Counted after the move: every heartbeat answered from here on saw the new time.
    const int64_t seen = p.registry.stats().heartbeats;
    ASSERT_TRUE(p.heartbeat_after(seen)) << "no heartbeat within 10 s";
  }
  // The unwatched one is gone: its blocks came back.
  auto freed = p.registry.take_freed();
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0], (HeldKv{{{2}}}));
  EXPECT_EQ(p.registry.stats().expired, 1);
  client.release(1);
  const ReleaseResult r = wait_release(client);
  EXPECT_TRUE(r.whole) << r.error;
  // A release after expiry reads "not whole": the bytes may be another prompt's.
  client.watch(2, p.lease_for(lapsed));
  client.release(2);
  EXPECT_FALSE(wait_release(client).whole);
}

TEST(Leases, AnotherEpochIsAnotherPeer) {
  Producer p(13, milliseconds(30000));
  const LeaseInfo info = p.registry.create(HeldKv{{{1}}});
  LeaseClient client;
  RemoteLease stale = p.lease_for(info);
  stale.epoch = 99;  // the lease of an earlier incarnation at the same address
  client.watch(1, stale);
  client.release(1);
  EXPECT_FALSE(wait_release(client).whole);
  EXPECT_TRUE(p.registry.take_freed().empty());  // this incarnation's lease stands
}

TEST(Leases, AnUnreachableProducerIsAClearErrorNotAHang) {
  auto probe = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int port = probe->port();
  probe->close();
  LeaseClient client;
  client.watch(1, RemoteLease{"127.0.0.1", port, 1, 1, milliseconds(30000)});
  const auto t0 = std::chrono::steady_clock::now();
  client.release(1);
  const ReleaseResult r = wait_release(client);
  EXPECT_FALSE(r.whole);
  EXPECT_NE(r.error.find("cannot connect"), std::string::npos) << r.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, LeaseClient::kCallTimeout * 2);
}

TEST(KvTransferConfig, TheGuidesSpellings) {
  auto c = parse_kv_transfer_config(R"({"kv_connector": "MooncakeConnectorV1",
      "kv_role": "kv_consumer", "kv_port": "30200", "engine_id": "2",
      "kv_connector_module_path": "vllm_ascend.distributed.mooncake_connector",
      "kv_connector_extra_config": {"prefill": {"dp_size": 2, "tp_size": 8},
                                    "decode": {"dp_size": 32, "tp_size": 1},
                                    "kv_lease_duration": 6.5}})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->role, KvRole::kConsumer);
  EXPECT_EQ(c->kv_port, 30200);
  EXPECT_EQ(c->engine_id, "2");
  EXPECT_EQ(c->prefill->tp_size, 8);
  EXPECT_EQ(c->decode->dp_size, 32);
  EXPECT_EQ(c->lease_duration, milliseconds(6500));
  EXPECT_EQ(c->load_failure_policy, KvLoadFailurePolicy::kRecompute);
  auto p = parse_kv_transfer_config(
      R"({"kv_connector": "MooncakeHybridConnector", "kv_role": "kv_producer", "kv_port": 30000,
          "kv_load_failure_policy": "fail"})");
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->produces());
  EXPECT_FALSE(p->consumes());
  EXPECT_EQ(p->kv_port, 30000);
  EXPECT_EQ(p->load_failure_policy, KvLoadFailurePolicy::kFail);
  auto layerwise = parse_kv_transfer_config(R"({"kv_connector": "MooncakeLayerwiseConnector"})");
  ASSERT_FALSE(layerwise.ok());
  EXPECT_NE(layerwise.error().message.find("push connector"), std::string::npos);
  EXPECT_FALSE(parse_kv_transfer_config(R"({"kv_connector": "NixlConnector"})").ok());
  EXPECT_FALSE(
      parse_kv_transfer_config(R"({"kv_connector": "MooncakeConnector", "kv_port": "x"})").ok());
  EXPECT_FALSE(
      parse_kv_transfer_config(R"({"kv_connector": "MooncakeConnector", "kv_role": "both"})").ok());
}

TEST(KvTransferConfig, TheTransportIsTcpUnlessAskedForUcx) {
  auto transport = [](const std::string& extra) {
    return parse_kv_transfer_config(
        R"({"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer",
            "kv_connector_extra_config": )" +
        extra + "}");
  };
  EXPECT_EQ(transport("{}")->transport, KvTransport::kTcp);
  EXPECT_EQ(transport(R"({"kv_transport": "tcp"})")->transport, KvTransport::kTcp);
  EXPECT_EQ(transport(R"({"kv_transport": "auto"})")->transport, KvTransport::kAuto);
  auto ucx = transport(R"({"kv_transport": "ucx"})");
  if (ucx_available()) {
    ASSERT_TRUE(ucx.ok()) << ucx.error().message;
    EXPECT_EQ(ucx->transport, KvTransport::kUcx);
  } else {
    ASSERT_FALSE(ucx.ok());
    EXPECT_NE(ucx.error().message.find("no UCX"), std::string::npos);
  }
  auto bad = transport(R"({"kv_transport": "rdma"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("\"rdma\" is none of auto, tcp, ucx"), std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace kestrel
