// The KV transfer path between real TCP endpoints on loopback: a producer rank's server and a
// consumer rank's puller over two KV pools of random bytes. A pull lands exactly the remote
// blocks' bytes in the local blocks (every plane, this rank's heads), whatever the TP split on
// each side — one producer rank, two that split the heads, four that replicate them, a latent
// cache read whole — and nothing else changes; an incompatible producer is refused at the
// handshake naming both keys; a producer that dies mid-pull, or never answers, fails the job by
// its deadline instead of hanging it; bad reads get an error and the server keeps serving. A
// linear-attention state slot is read by key head into the consumer's slot across TP splits, over
// TCP and UCX, and a missing or foreign slot fails the job.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "kvx/kv_puller.h"
#include "kvx/kv_server.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

// A KV pool's memory, filled with bytes that name each position.
struct Pool {
  std::vector<uint8_t> bytes;
  KVMemoryView view;
  Pool(int planes, int64_t blocks, int heads, size_t head_bytes, uint32_t seed) {
    bytes.resize(size_t(planes) * size_t(blocks) * size_t(heads) * head_bytes);
    std::mt19937 rng(seed);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    view.base = bytes.data();
    view.num_blocks = blocks;
    view.planes = planes;
    view.heads = heads;
    view.block_bytes = size_t(heads) * head_bytes;
  }
  // Linear-attention state slots laid out as `s` says, each value naming its slot, layer, part
  // (q, k, v conv, recurrent), key head and index.
  void add_state(const StateRankInfo& s) {
    state.assign(size_t(s.entries) * size_t(s.layers) * size_t(s.floats_per_layer()), -1.0f);
    view.state = state.data();
    view.state_entries = s.entries;
    view.state_layers = s.layers;
    view.state_floats_per_layer = s.floats_per_layer();
    for (int32_t slot = 0; slot < s.entries; ++slot) fill_slot(s, slot, slot);
  }
  // Slot `slot` gets the values of slot `as`.
  void fill_slot(const StateRankInfo& s, int32_t slot, int32_t as) {
    for (int layer = 0; layer < s.layers; ++layer)
      for (int h = s.key_head_begin; h < s.key_head_end; ++h) {
        const std::vector<StateRun> runs = state_runs(s, h, h + 1);
        for (size_t part = 0; part < runs.size(); ++part)
          for (int64_t i = 0; i < runs[part].floats; ++i)
            view.state_at(slot, layer)[runs[part].offset + i] = state_value(as, layer, part, h, i);
      }
  }
  static float state_value(int32_t slot, int layer, size_t part, int head, int64_t i) {
    return float(slot * 100000 + layer * 10000 + int(part) * 1000 + head * 100 + i);
  }
  std::vector<float> state;
};

constexpr int kPlanes = 6;
constexpr int kHeads = 4;
constexpr size_t kHeadBytes = 96;
const std::string kCompat = "llama layers=3 kv_heads=4 head_dim=48 kv_dtype=bf16";

KvRankInfo rank_info(const KVMemoryView& m, int tp_rank, int tp_size, int h0, int h1,
                     bool latent = false, const std::string& compat = kCompat,
                     int total_heads = kHeads) {
  return describe_kv_rank(m, "engine-p", 77, compat, tp_rank, tp_size, h0, h1,
                          latent ? 1 : total_heads, latent);
}

// Whether local block `lb` holds remote block `rb`'s heads [h0, h1) in every plane (local heads
// counted from local_h0), and nothing else of it changed.
bool holds(const KVMemoryView& local, int64_t lb, int local_h0, const KVMemoryView& remote,
           int64_t rb, int remote_h0, int h0, int h1) {
  const size_t hb = local.head_bytes();
  for (int p = 0; p < local.planes; ++p)
    if (std::memcmp(local.at(p, lb, h0 - local_h0), remote.at(p, rb, h0 - remote_h0),
                    size_t(h1 - h0) * hb) != 0)
      return false;
  return true;
}

KvPullResult wait_one(KvPuller& puller, milliseconds limit = milliseconds(20000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto done = puller.take_finished();
    if (!done.empty()) return done[0];
    std::this_thread::sleep_for(milliseconds(2));
  }
  return KvPullResult{0, false, "the test gave up waiting", 0, 0};
}

KvPullJob job(int port, int tp_size, std::vector<int64_t> remote, std::vector<int64_t> local,
              milliseconds timeout = milliseconds(5000)) {
  KvPullJob j;
  j.id = 7;
  j.host = "127.0.0.1";
  j.port = port;
  j.tp_size = tp_size;
  j.remote_blocks = std::move(remote);
  j.local_blocks = std::move(local);
  j.deadline = deadline_in(timeout);
  return j;
}

// Producer ranks on consecutive ports from a free one; rank r holds heads[r] of total_heads
// (and its pool's linear-attention state as states[r] describes, when given).
// With `ucx`, each rank also registers its pool with UCX (kept there) and advertises it.
std::vector<std::unique_ptr<KvServer>> start_ranks(
    const std::vector<Pool*>& pools, const std::vector<std::pair<int, int>>& heads,
    int total_heads = kHeads, std::vector<std::unique_ptr<UcxProducer>>* ucx = nullptr,
    const std::vector<StateRankInfo>& states = {}) {
  if (ucx != nullptr)
    for (Pool* pool : pools) {
      auto producer = UcxProducer::start(pool->view);
      EXPECT_TRUE(producer.ok()) << producer.error().message;
      if (!producer.ok()) return {};
      ucx->push_back(std::move(*producer));
    }
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto probe = TcpListener::listen("127.0.0.1", 0);
    if (!probe.ok()) continue;
    const int base = probe->port();
    probe->close();
    std::vector<std::unique_ptr<KvServer>> servers;
    for (size_t r = 0; r < pools.size(); ++r) {
      KvRankInfo info = rank_info(pools[r]->view, int(r), int(pools.size()), heads[r].first,
                                  heads[r].second, false, kCompat, total_heads);
      if (!states.empty()) info.state = states[r];
      auto s = KvServer::start("127.0.0.1", base + int(r), pools[r]->view, info, {},
                               ucx ? (*ucx)[r]->advertisement() : nlohmann::json());
      if (!s.ok()) break;
      servers.push_back(std::move(*s));
    }
    if (servers.size() == pools.size()) return servers;
  }
  ADD_FAILURE() << "no free port block";
  return {};
}

TEST(KvTransfer, OneProducerRankToOneConsumerRank) {
  Pool p(kPlanes, 40, kHeads, kHeadBytes, 1), d(kPlanes, 30, kHeads, kHeadBytes, 2);
  const std::vector<uint8_t> before = d.bytes;
  auto servers = start_ranks({&p}, {{0, kHeads}});
  ASSERT_EQ(servers.size(), 1u);
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads));
  const std::vector<int64_t> remote = {7, 8, 9, 33, 2}, local = {3, 4, 5, 6, 29};
  puller.submit(job(servers[0]->port(), 1, remote, local));
  const KvPullResult r = wait_one(puller);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.id, 7u);
  EXPECT_EQ(r.bytes, int64_t(kPlanes * 5 * kHeads * kHeadBytes));
  for (size_t i = 0; i < remote.size(); ++i)
    EXPECT_TRUE(holds(d.view, local[i], 0, p.view, remote[i], 0, 0, kHeads)) << "block " << i;
  // Every other block is untouched.
  for (int pl = 0; pl < kPlanes; ++pl)
    for (int64_t b = 0; b < 30; ++b) {
      if (std::find(local.begin(), local.end(), b) != local.end()) continue;
      EXPECT_EQ(std::memcmp(d.view.at(pl, b), before.data() + (d.view.at(pl, b) - d.bytes.data()),
                            d.view.block_bytes),
                0)
          << "plane " << pl << " block " << b << " changed";
    }
  EXPECT_EQ(servers[0]->stats().bytes_sent.load(), r.bytes);
  EXPECT_EQ(puller.stats().blocks_received.load(), 5);
  // The connection is pooled: a second pull works the same.
  puller.submit(job(servers[0]->port(), 1, {10}, {11}));
  ASSERT_TRUE(wait_one(puller).ok);
  EXPECT_TRUE(holds(d.view, 11, 0, p.view, 10, 0, 0, kHeads));
}

TEST(KvTransfer, TwoProducerRanksSplitTheHeadsForOneConsumerRank) {
  Pool p0(kPlanes, 20, 2, kHeadBytes, 3), p1(kPlanes, 20, 2, kHeadBytes, 4);
  Pool d(kPlanes, 20, kHeads, kHeadBytes, 5);
  auto servers = start_ranks({&p0, &p1}, {{0, 2}, {2, 4}});
  ASSERT_EQ(servers.size(), 2u);
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads));
  puller.submit(job(servers[0]->port(), 2, {5, 6}, {1, 2}));
  const KvPullResult r = wait_one(puller);
  ASSERT_TRUE(r.ok) << r.error;
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(holds(d.view, 1 + i, 0, p0.view, 5 + i, 0, 0, 2));
    EXPECT_TRUE(holds(d.view, 1 + i, 0, p1.view, 5 + i, 2, 2, 4));
  }
}

TEST(KvTransfer, ReplicatedProducerHeadsAndTwoConsumerRanks) {
  // Producer TP 4 over 2 KV heads: each head on two ranks. Consumer TP 2: one head each.
  std::vector<Pool> p;
  for (int r = 0; r < 4; ++r) p.emplace_back(kPlanes, 12, 1, kHeadBytes, 10 + uint32_t(r));
  auto servers =
      start_ranks({&p[0], &p[1], &p[2], &p[3]}, {{0, 1}, {0, 1}, {1, 2}, {1, 2}}, /*heads=*/2);
  ASSERT_EQ(servers.size(), 4u);
  for (int c = 0; c < 2; ++c) {
    Pool d(kPlanes, 12, 1, kHeadBytes, 20 + uint32_t(c));
    KvPuller puller(d.view, rank_info(d.view, c, 2, c, c + 1, false, kCompat, 2));
    puller.submit(job(servers[0]->port(), 4, {3}, {9}));
    const KvPullResult r = wait_one(puller);
    ASSERT_TRUE(r.ok) << "consumer rank " << c << ": " << r.error;
    // From the first producer rank that holds its head.
    EXPECT_TRUE(holds(d.view, 9, c, p[size_t(2 * c)].view, 3, c, c, c + 1))
        << "consumer rank " << c;
  }
}

TEST(KvTransfer, ALatentCacheIsReadWholeFromOneRank) {
  Pool p0(3, 10, 1, 576, 30), p1(3, 10, 1, 576, 30);  // replicated: the same bytes
  Pool d(3, 10, 1, 576, 31);
  auto probe = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int base = probe->port();
  probe->close();
  auto s0 = KvServer::start("127.0.0.1", base, p0.view, rank_info(p0.view, 0, 2, 0, 1, true));
  auto s1 = KvServer::start("127.0.0.1", base + 1, p1.view, rank_info(p1.view, 1, 2, 0, 1, true));
  ASSERT_TRUE(s0.ok() && s1.ok());
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, 1, true));
  puller.submit(job(base, 2, {4, 5}, {1, 2}));
  const KvPullResult r = wait_one(puller);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.bytes, int64_t(3 * 2 * 576));  // one read, not one per rank
  EXPECT_TRUE(holds(d.view, 1, 0, p0.view, 4, 0, 0, 1));
  EXPECT_EQ((*s0)->stats().reads.load() + (*s1)->stats().reads.load(), 1);
}

TEST(KvTransfer, AnIncompatibleProducerIsRefusedNamingBothKeys) {
  Pool p(kPlanes, 10, kHeads, kHeadBytes, 40), d(kPlanes, 10, kHeads, kHeadBytes, 41);
  auto servers = start_ranks({&p}, {{0, kHeads}});
  ASSERT_EQ(servers.size(), 1u);
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads, false, "qwen3 other"));
  puller.submit(job(servers[0]->port(), 1, {1}, {1}));
  const KvPullResult r = wait_one(puller);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("incompatible KV cache: [qwen3 other] here, [" + kCompat + "] there"),
            std::string::npos)
      << r.error;
  EXPECT_EQ(servers[0]->stats().reads.load(), 0);
}

TEST(KvTransfer, BadReadsGetAnErrorAndTheServerKeepsServing) {
  Pool p(kPlanes, 10, kHeads, kHeadBytes, 50), d(kPlanes, 10, kHeads, kHeadBytes, 51);
  auto servers = start_ranks({&p}, {{0, kHeads}});
  ASSERT_EQ(servers.size(), 1u);
  auto conn = TcpConn::connect("127.0.0.1", servers[0]->port(), deadline_in(milliseconds(2000)));
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(
      conn->send_message({{"op", "read"}, {"blocks", {0}}, {"head_begin", 0}, {"head_end", 4}},
                         deadline_in(milliseconds(2000)))
          .ok());
  auto reply = conn->recv_message(deadline_in(milliseconds(2000)));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->value("op", ""), "error");  // the null block is nobody's
  ASSERT_TRUE(
      conn->send_message({{"op", "read"}, {"blocks", {1}}, {"head_begin", 3}, {"head_end", 9}},
                         deadline_in(milliseconds(2000)))
          .ok());
  reply = conn->recv_message(deadline_in(milliseconds(2000)));
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(reply->value("error", "").find("heads [3, 9)"), std::string::npos) << reply->dump();
  // Garbage closes that connection only.
  ASSERT_TRUE(conn->send_all("\x00\x00\x00\x03xyz", 7, deadline_in(milliseconds(2000))).ok());
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads));
  puller.submit(job(servers[0]->port(), 1, {2}, {2}));
  EXPECT_TRUE(wait_one(puller).ok);
}

TEST(KvTransfer, AProducerThatDiesOrNeverAnswersFailsTheJobByItsDeadline) {
  Pool d(kPlanes, 10, kHeads, kHeadBytes, 60);
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads));
  // Nothing listens: refused at once.
  auto probe = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int dead = probe->port();
  probe->close();
  puller.submit(job(dead, 1, {1}, {1}));
  KvPullResult r = wait_one(puller);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("cannot connect"), std::string::npos) << r.error;
  // A listener that accepts and never answers: the deadline ends the job.
  auto mute = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(mute.ok());
  const auto t0 = std::chrono::steady_clock::now();
  puller.submit(job(mute->port(), 1, {1}, {1}, milliseconds(400)));
  r = wait_one(puller);
  EXPECT_FALSE(r.ok);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(3000));
  // A producer that dies mid-pull: it announces the bytes, sends half, and closes.
  auto half = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(half.ok());
  std::thread producer([&] {
    auto accepted = half->accept(milliseconds(5000));
    if (!accepted.ok() || !accepted->has_value()) return;
    TcpConn& c = **accepted;
    Pool p(kPlanes, 10, kHeads, kHeadBytes, 63);
    (void)c.recv_message(deadline_in(milliseconds(2000)));
    (void)c.send_message({{"op", "hello"}, {"rank", rank_info(p.view, 0, 1, 0, kHeads).to_json()}},
                         deadline_in(milliseconds(2000)));
    (void)c.recv_message(deadline_in(milliseconds(2000)));
    const int64_t bytes = int64_t(kPlanes * kHeads * kHeadBytes);
    (void)c.send_message({{"op", "data"}, {"bytes", bytes}}, deadline_in(milliseconds(2000)));
    (void)c.send_all(p.bytes.data(), size_t(bytes / 2), deadline_in(milliseconds(2000)));
  });
  const auto t1 = std::chrono::steady_clock::now();
  puller.submit(job(half->port(), 1, {1}, {1}, milliseconds(8000)));
  r = wait_one(puller);
  producer.join();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("closed the connection"), std::string::npos) << r.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t1, milliseconds(3000));  // not the deadline
}

// UCX's one-sided reads (kvx/ucx_transport.h) land the same bytes as the TCP stream: whole
// blocks from one producer rank and halves from two, none of it through the producers' TCP
// streams; a consumer without a usable advertisement reads over TCP; reads outside a producer's
// pool are refused before any is issued.
std::unique_ptr<UcxConsumer> ucx_consumer() {
  auto c = UcxConsumer::start();
  EXPECT_TRUE(c.ok()) << c.error().message;
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(KvTransferUcx, OneSidedReadsLandTheSameBytes) {
  if (!ucx_available()) GTEST_SKIP() << "built without libucx-dev";
  Pool p(kPlanes, 40, kHeads, kHeadBytes, 71), d(kPlanes, 30, kHeads, kHeadBytes, 72);
  std::vector<std::unique_ptr<UcxProducer>> ucx;
  auto servers = start_ranks({&p}, {{0, kHeads}}, kHeads, &ucx);
  ASSERT_EQ(servers.size(), 1u);
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads), 2, ucx_consumer());
  const std::vector<int64_t> remote = {7, 8, 9, 33, 2}, local = {3, 4, 5, 6, 29};
  puller.submit(job(servers[0]->port(), 1, remote, local));
  const KvPullResult r = wait_one(puller);
  ASSERT_TRUE(r.ok) << r.error;
  for (size_t i = 0; i < remote.size(); ++i)
    EXPECT_TRUE(holds(d.view, local[i], 0, p.view, remote[i], 0, 0, kHeads)) << "block " << i;
  EXPECT_EQ(puller.stats().bytes_over_ucx.load(), r.bytes);
  EXPECT_EQ(servers[0]->stats().reads.load(), 0);  // nothing over the TCP stream

  // Two producer ranks of two heads each: strided half-block reads from both.
  Pool p0(kPlanes, 20, 2, kHeadBytes, 73), p1(kPlanes, 20, 2, kHeadBytes, 74);
  std::vector<std::unique_ptr<UcxProducer>> ucx2;
  auto halves = start_ranks({&p0, &p1}, {{0, 2}, {2, 4}}, kHeads, &ucx2);
  ASSERT_EQ(halves.size(), 2u);
  puller.submit(job(halves[0]->port(), 2, {5, 19}, {1, 2}));
  ASSERT_TRUE(wait_one(puller).ok);
  for (int i = 0; i < 2; ++i) {
    const int64_t rb = i == 0 ? 5 : 19;
    EXPECT_TRUE(holds(d.view, 1 + i, 0, p0.view, rb, 0, 0, 2));
    EXPECT_TRUE(holds(d.view, 1 + i, 0, p1.view, rb, 2, 2, 4));
  }
  EXPECT_EQ(halves[0]->stats().reads.load() + halves[1]->stats().reads.load(), 0);
}

TEST(KvTransferUcx, AnUnusableAdvertisementFallsBackToTcp) {
  if (!ucx_available()) GTEST_SKIP() << "built without libucx-dev";
  Pool p(kPlanes, 10, kHeads, kHeadBytes, 75), d(kPlanes, 10, kHeads, kHeadBytes, 76);
  auto probe = TcpListener::listen("127.0.0.1", 0);
  ASSERT_TRUE(probe.ok());
  const int port = probe->port();
  probe->close();
  auto server = KvServer::start(
      "127.0.0.1", port, p.view, rank_info(p.view, 0, 1, 0, kHeads), {},
      nlohmann::json{{"address", "00ff"}, {"rkey", "00"}, {"base", 4096}, {"length", 64}});
  ASSERT_TRUE(server.ok());
  KvPuller puller(d.view, rank_info(d.view, 0, 1, 0, kHeads), 1, ucx_consumer());
  puller.submit(job(port, 1, {3}, {4}));
  const KvPullResult r = wait_one(puller);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(holds(d.view, 4, 0, p.view, 3, 0, 0, kHeads));
  EXPECT_EQ(puller.stats().bytes_over_ucx.load(), 0);
  EXPECT_EQ((*server)->stats().reads.load(), 1);
}

TEST(KvTransferUcx, ReadsOutsideTheProducersPoolAreRefused) {
  if (!ucx_available()) GTEST_SKIP() << "built without libucx-dev";
  Pool p(kPlanes, 4, kHeads, kHeadBytes, 77);
  auto producer = UcxProducer::start(p.view);
  ASSERT_TRUE(producer.ok()) << producer.error().message;
  auto consumer = ucx_consumer();
  ASSERT_NE(consumer, nullptr);
  auto remote = consumer->connect((*producer)->advertisement());
  ASSERT_TRUE(remote.ok()) << remote.error().message;
  std::vector<uint8_t> into(2 * kHeadBytes);
  const uint64_t end = (*remote)->base() + (*remote)->length();
  const Status past =
      consumer->read(**remote, {UcxRead{into.data(), end - kHeadBytes, 2 * kHeadBytes}},
                     deadline_in(milliseconds(2000)));
  EXPECT_FALSE(past.ok());
  EXPECT_NE(past.message().find("outside"), std::string::npos) << past.message();
  const Status inside =
      consumer->read(**remote, {UcxRead{into.data(), end - 2 * kHeadBytes, 2 * kHeadBytes}},
                     deadline_in(milliseconds(2000)));
  ASSERT_TRUE(inside.ok()) << inside.message();
  EXPECT_EQ(std::memcmp(into.data(), p.bytes.data() + p.bytes.size() - 2 * kHeadBytes, into.size()),
            0);
}

// Linear-attention states (kvx/kv_rank.h): 4 key heads of 2 layers, runs of 3 (q and k conv),
// 5 (v conv) and 7 (recurrent) values per key head; a rank holds key heads [h0, h1).
StateRankInfo state_rank(int h0, int h1, int32_t entries) {
  return StateRankInfo{2, entries, h0, h1, 4, 3, 5, 7};
}

TEST(KvTransferState, RunsFollowTheLayersLayout) {
  const StateRankInfo s = state_rank(2, 4, 1);
  EXPECT_EQ(s.floats_per_layer(), 2 * (3 + 3 + 5 + 7));
  const std::vector<StateRun> runs = state_runs(s, 3, 4);
  ASSERT_EQ(runs.size(), 4u);
  // [q of heads 2, 3 | k of 2, 3 | v of 2, 3 | recurrent of 2, 3]: head 3's part of each.
  EXPECT_EQ(runs[0].offset, 3);
  EXPECT_EQ(runs[1].offset, 6 + 3);
  EXPECT_EQ(runs[2].offset, 12 + 5);
  EXPECT_EQ(runs[3].offset, 22 + 7);
  EXPECT_EQ(runs[3].floats, 7);
  const std::vector<StateRun> both = state_runs(s, 2, 4);
  EXPECT_EQ(both[2].offset, 12);
  EXPECT_EQ(both[2].floats, 10);
}

// Whether slot `slot` of `pool` holds the values of remote slot `as` for its key heads.
bool state_is(const Pool& pool, const StateRankInfo& s, int32_t slot, int32_t as) {
  Pool want(1, 2, 1, 8, 0);
  want.add_state(s);
  want.fill_slot(s, slot, as);
  const size_t per = size_t(s.layers) * size_t(s.floats_per_layer());
  return std::equal(pool.state.begin() + std::ptrdiff_t(size_t(slot) * per),
                    pool.state.begin() + std::ptrdiff_t(size_t(slot + 1) * per),
                    want.state.begin() + std::ptrdiff_t(size_t(slot) * per));
}

// A consumer rank of `pool` with heads [h0, h1) and state `st` pulls one block and the state
// slot `remote_state` into its slot `local_state`.
KvPullResult pull_state(const Pool& pool, int tp_rank, int tp_size, int h0, int h1,
                        const StateRankInfo& st, int port, int producer_tp, int64_t remote_block,
                        int64_t local_block, int32_t remote_state, int32_t local_state,
                        std::unique_ptr<UcxConsumer> ucx = nullptr) {
  KvRankInfo self = rank_info(pool.view, tp_rank, tp_size, h0, h1);
  self.state = st;
  KvPuller puller(pool.view, self, 2, std::move(ucx));
  KvPullJob j = job(port, producer_tp, {remote_block}, {local_block});
  j.remote_state = remote_state;
  j.local_state = local_state;
  puller.submit(j);
  return wait_one(puller);
}

TEST(KvTransferState, AStateSlotIsRecutByKeyHeadBetweenTpSizes) {
  // Two producer ranks of two key heads each, one consumer rank of all four.
  Pool p0(kPlanes, 10, 2, kHeadBytes, 81), p1(kPlanes, 10, 2, kHeadBytes, 82);
  const StateRankInfo s0 = state_rank(0, 2, 6), s1 = state_rank(2, 4, 6);
  p0.add_state(s0);
  p1.add_state(s1);
  auto servers = start_ranks({&p0, &p1}, {{0, 2}, {2, 4}}, kHeads, nullptr, {s0, s1});
  ASSERT_EQ(servers.size(), 2u);
  Pool d(kPlanes, 10, kHeads, kHeadBytes, 83);
  const StateRankInfo whole = state_rank(0, 4, 3);
  d.add_state(whole);
  const KvPullResult r =
      pull_state(d, 0, 1, 0, kHeads, whole, servers[0]->port(), 2, 4, 2, /*remote_state=*/5, 1);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(state_is(d, whole, 1, 5));
  EXPECT_TRUE(state_is(d, whole, 0, 0));  // the other slots are untouched
  EXPECT_TRUE(state_is(d, whole, 2, 2));
  EXPECT_EQ(r.bytes, int64_t(kPlanes * kHeads * kHeadBytes) +
                         int64_t(2 * whole.floats_per_layer() * sizeof(float)));

  // The reverse: one producer rank of all four, two consumer ranks of two.
  Pool p(kPlanes, 10, kHeads, kHeadBytes, 84);
  const StateRankInfo ps = state_rank(0, 4, 4);
  p.add_state(ps);
  auto one = start_ranks({&p}, {{0, kHeads}}, kHeads, nullptr, {ps});
  ASSERT_EQ(one.size(), 1u);
  for (int rank = 0; rank < 2; ++rank) {
    Pool half(kPlanes, 10, 2, kHeadBytes, uint32_t(85 + rank));
    const StateRankInfo hs = state_rank(2 * rank, 2 * rank + 2, 2);
    half.add_state(hs);
    const KvPullResult hr =
        pull_state(half, rank, 2, 2 * rank, 2 * rank + 2, hs, one[0]->port(), 1, 3, 1, 3, 0);
    ASSERT_TRUE(hr.ok) << hr.error;
    EXPECT_TRUE(state_is(half, hs, 0, 3)) << "rank " << rank;
    EXPECT_TRUE(state_is(half, hs, 1, 1)) << "rank " << rank;
  }
}

TEST(KvTransferState, AMissingOrForeignStateSlotFailsTheJob) {
  Pool p(kPlanes, 10, kHeads, kHeadBytes, 91), d(kPlanes, 10, kHeads, kHeadBytes, 92);
  const StateRankInfo s = state_rank(0, 4, 2);
  p.add_state(s);
  d.add_state(s);
  auto servers = start_ranks({&p}, {{0, kHeads}}, kHeads, nullptr, {s});
  ASSERT_EQ(servers.size(), 1u);
  KvRankInfo self = rank_info(d.view, 0, 1, 0, kHeads);
  self.state = s;
  KvPuller puller(d.view, self);
  KvPullJob none = job(servers[0]->port(), 1, {2}, {3});
  none.local_state = 0;  // the producer named no slot
  puller.submit(none);
  KvPullResult r = wait_one(puller);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("no linear-attention state"), std::string::npos) << r.error;
  KvPullJob foreign = job(servers[0]->port(), 1, {2}, {3});
  foreign.remote_state = 9;  // not one of the producer's two
  foreign.local_state = 1;
  puller.submit(foreign);
  r = wait_one(puller);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("state slot 9"), std::string::npos) << r.error;
  EXPECT_TRUE(state_is(d, s, 1, 1));  // nothing landed
  // A producer without linear-attention layers is refused at the handshake.
  Pool plain(kPlanes, 10, kHeads, kHeadBytes, 93);
  auto other = start_ranks({&plain}, {{0, kHeads}});
  ASSERT_EQ(other.size(), 1u);
  KvPullJob j = job(other[0]->port(), 1, {2}, {3});
  j.remote_state = 0;
  j.local_state = 1;
  puller.submit(j);
  r = wait_one(puller);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("linear-attention state out otherwise"), std::string::npos) << r.error;
}

TEST(KvTransferUcx, AStateSlotIsReadOneSided) {
  if (!ucx_available()) GTEST_SKIP() << "built without libucx-dev";
  Pool p0(kPlanes, 10, 2, kHeadBytes, 94), p1(kPlanes, 10, 2, kHeadBytes, 95);
  const StateRankInfo s0 = state_rank(0, 2, 4), s1 = state_rank(2, 4, 4);
  p0.add_state(s0);
  p1.add_state(s1);
  std::vector<std::unique_ptr<UcxProducer>> ucx;
  auto servers = start_ranks({&p0, &p1}, {{0, 2}, {2, 4}}, kHeads, &ucx, {s0, s1});
  ASSERT_EQ(servers.size(), 2u);
  Pool d(kPlanes, 10, kHeads, kHeadBytes, 96);
  const StateRankInfo whole = state_rank(0, 4, 2);
  d.add_state(whole);
  const KvPullResult r =
      pull_state(d, 0, 1, 0, kHeads, whole, servers[0]->port(), 2, 6, 5, 3, 0, ucx_consumer());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(state_is(d, whole, 0, 3));
  EXPECT_EQ(r.ucx_bytes, r.bytes);
  EXPECT_EQ(servers[0]->stats().reads.load() + servers[1]->stats().reads.load(), 0);
}

}  // namespace
}  // namespace kestrel
