// The data-parallel lockstep of expert parallelism, in one process (the ranks' engine threads
// meet through the group's store and shared memory, as the head's ranks do):
// - the group protocol: a rank with work starts a wave and a rank with none steps with it until
//   no rank has work, the wave ends on both at the same step and both move to the next one; a
//   rank whose settings differ from rank 0's is refused naming both; a rank that never comes
//   makes the others fail naming the address; a rank that leaves fails the others at once;
// - the engine: two data-parallel ranks sharing the experts of a MoE model (Qwen3-MoE; the
//   DeepSeek-V3 fixture with MTP drafting on each rank) give every request the tokens one
//   process gives it — under load, with one rank idle the whole time, across pauses between
//   waves — and a rank whose group fails ends its requests with the error.
#include "engine/dp_lockstep.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "distributed/group_comm.h"
#include "distributed/shared_flag.h"
#include "engine/engine_client.h"
#include "engine/engine_runs.h"
#include "engine/fixture_models.h"
#include "spec_decode/proposer.h"
#include "spec_decode/speculative_config.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

std::string ipc_endpoint(const std::string& tag) {
  static int n = 0;
  return "ipc:///tmp/kestrel-lockstep-test-" + std::to_string(getpid()) + "-" + tag + "-" +
         std::to_string(n++) + ".sock";
}

DpLockstepOptions lockstep_options(const std::string& endpoint, int rank, int size,
                                   std::atomic<bool>* abort) {
  DpLockstepOptions o;
  o.endpoint = endpoint;
  o.rank = rank;
  o.size = size;
  o.settings = "model=x tp=1";
  o.start_timeout = milliseconds(10000);
  o.step_timeout = milliseconds(10000);
  o.abort = abort;
  return o;
}

// Connects `size` members at once (each blocks until all are there).
std::vector<std::unique_ptr<DpLockstep>> connect_all(const std::string& endpoint, int size,
                                                     std::vector<SharedFlag>& aborts) {
  std::vector<Expected<std::unique_ptr<DpLockstep>>> made;
  for (int r = 0; r < size; ++r) made.emplace_back(make_error("unset"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      made[size_t(r)] =
          DpLockstep::connect(lockstep_options(endpoint, r, size, &aborts[size_t(r)].get()));
    });
  for (auto& t : threads) t.join();
  std::vector<std::unique_ptr<DpLockstep>> out;
  for (auto& m : made) {
    EXPECT_TRUE(m.ok()) << m.error().message;
    out.push_back(m.ok() ? std::move(*m) : nullptr);
  }
  return out;
}

TEST(DpLockstep, AnIdleRankStepsWithABusyOneUntilTheWaveEndsOnBoth) {
  auto server = StoreServer::start(ipc_endpoint("wave"));
  ASSERT_TRUE(server.ok());
  std::vector<SharedFlag> aborts(2);
  auto members = connect_all((*server)->endpoint(), 2, aborts);
  ASSERT_TRUE(members[0] && members[1]);
  for (int wave = 0; wave < 3; ++wave) {
    // Rank `busy` has 5 steps of work; the other has none and only learns of the wave.
    const int busy = wave % 2, idle = 1 - busy;
    std::atomic<int> idle_steps{0}, busy_steps{0};
    std::thread idle_thread([&] {
      DpLockstep& m = *members[size_t(idle)];
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!m.join(false)) {
        if (std::chrono::steady_clock::now() > deadline) return;
        std::this_thread::sleep_for(milliseconds(1));
      }
      while (true) {
        auto any = m.agree(false);
        if (!any.ok() || !*any) return;
        ++idle_steps;
      }
    });
    DpLockstep& m = *members[size_t(busy)];
    int left = 5;
    ASSERT_TRUE(m.join(left > 0));
    while (true) {
      auto any = m.agree(left > 0);
      ASSERT_TRUE(any.ok()) << any.error().message;
      if (!*any) break;
      ++busy_steps;
      --left;
    }
    idle_thread.join();
    EXPECT_EQ(busy_steps.load(), 5) << "wave " << wave;
    EXPECT_EQ(idle_steps.load(), 5) << "wave " << wave << ": the idle rank missed steps";
    EXPECT_EQ(members[0]->wave(), wave + 1);
    EXPECT_EQ(members[1]->wave(), wave + 1);
    EXPECT_FALSE(members[0]->in_wave());
    EXPECT_FALSE(members[1]->in_wave());
  }
}

TEST(DpLockstep, ARankWithOtherSettingsIsRefusedNamingBoth) {
  auto server = StoreServer::start(ipc_endpoint("settings"));
  ASSERT_TRUE(server.ok());
  std::vector<SharedFlag> aborts(2);
  Expected<std::unique_ptr<DpLockstep>> zero = make_error("unset");
  std::thread t([&] {
    zero = DpLockstep::connect(lockstep_options((*server)->endpoint(), 0, 2, &aborts[0].get()));
  });
  DpLockstepOptions o = lockstep_options((*server)->endpoint(), 1, 2, &aborts[1].get());
  o.settings = "model=x tp=2";
  auto one = DpLockstep::connect(o);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("[model=x tp=2] but rank 0 with [model=x tp=1]"),
            std::string::npos)
      << one.error().message;
  // Rank 0 hears of it and stops waiting (its start timeout is 10 s).
  const auto t0 = std::chrono::steady_clock::now();
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("but rank 0 with"), std::string::npos)
      << zero.error().message;
}

TEST(DpLockstep, ARankThatNeverComesFailsTheStartNamingTheAddress) {
  auto server = StoreServer::start(ipc_endpoint("missing"));
  ASSERT_TRUE(server.ok());
  SharedFlag abort;
  DpLockstepOptions o = lockstep_options((*server)->endpoint(), 0, 2, &abort.get());
  o.start_timeout = milliseconds(300);
  auto zero = DpLockstep::connect(o);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("did not all come up at " + (*server)->endpoint()),
            std::string::npos)
      << zero.error().message;
  EXPECT_NE(zero.error().message.find("dp/settings/1"), std::string::npos) << zero.error().message;
}

TEST(DpLockstep, ARankThatLeavesFailsTheOthersAtOnce) {
  auto server = StoreServer::start(ipc_endpoint("leave"));
  ASSERT_TRUE(server.ok());
  std::vector<SharedFlag> aborts(2);
  auto members = connect_all((*server)->endpoint(), 2, aborts);
  ASSERT_TRUE(members[0] && members[1]);
  // The notice thread wakes the engine after it records the failure, so the wake may come just
  // after agree() has returned it: waited for, not read at once.
  std::promise<void> woken;
  std::once_flag once;
  members[0]->set_wake([&] { std::call_once(once, [&] { woken.set_value(); }); });
  // Rank 0 starts a wave and waits in the agreement for rank 1, which leaves instead.
  ASSERT_TRUE(members[0]->join(true));
  std::thread leaver([&] {
    std::this_thread::sleep_for(milliseconds(100));
    members[1].reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto any = members[0]->agree(true);
  leaver.join();
  ASSERT_FALSE(any.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_NE(any.error().message.find("data-parallel rank 1 stopped"), std::string::npos)
      << any.error().message;
  EXPECT_TRUE(members[0]->failure().has_value());
  EXPECT_TRUE(aborts[0].is_set());
  EXPECT_EQ(woken.get_future().wait_for(std::chrono::seconds(3)), std::future_status::ready);
}

// Two data-parallel ranks of a MoE fixture sharing their experts, each with its own model copy,
// in this process: the group's store, communicators and lockstep as serve builds them.
struct EpRanks {
  std::unique_ptr<StoreServer> store;
  std::vector<SharedFlag> aborts;
  std::vector<std::unique_ptr<StoreClient>> clients;
  std::vector<std::unique_ptr<DeviceComm>> ep_comms;
  std::vector<std::unique_ptr<LoadedModel>> models;
  std::unique_ptr<EngineClient> client;  // last: stopped first
};

EngineClientOptions ep_options(const CausalLM& model) {
  EngineClientOptions o = test::engine_options(64, true, 256);
  o.scheduler.num_blocks = 256;
  o.scheduler.kv_groups = model.kv_cache_layout(o.scheduler.block_size).groups;
  o.vocab_size = model.config().vocab_size;
  return o;
}

std::optional<SpeculativeConfig> mtp_config() {
  auto parsed = parse_speculative_config(R"({"method":"mtp","num_speculative_tokens":2})");
  EXPECT_TRUE(parsed.ok() && parsed->has_value());
  SpeculativeConfig s = **parsed;
  EXPECT_TRUE(resolve_speculative_config(s, 1, "deepseek_v3").ok());
  return s;
}

Speculation speculation(CausalLM& model, const SchedulerConfig& c,
                        const std::optional<SpeculativeConfig>& spec) {
  Speculation s;
  if (!spec) return s;
  ProposerOptions po;
  po.config = *spec;
  po.max_model_len = c.max_model_len;
  po.num_blocks = c.num_blocks;
  po.block_size = c.block_size;
  auto p = make_proposer(model, po);
  EXPECT_TRUE(p.ok()) << p.error().message;
  if (p.ok()) s.proposer = std::move(*p);
  s.max_drafting_requests = 64;
  return s;
}

std::unique_ptr<EpRanks> ep_ranks(const std::string& fixture, int size,
                                  const std::optional<SpeculativeConfig>& spec = std::nullopt) {
  auto r = std::make_unique<EpRanks>();
  auto server = StoreServer::start(ipc_endpoint("ep"));
  EXPECT_TRUE(server.ok());
  if (!server.ok()) return nullptr;
  r->store = std::move(*server);
  const std::string at = r->store->endpoint();
  r->aborts.resize(size_t(size));
  r->clients.resize(size_t(size));
  r->ep_comms.resize(size_t(size));
  r->models.resize(size_t(size));
  std::vector<std::unique_ptr<DpLockstep>> lockstep(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int d = 0; d < size; ++d)
    threads.emplace_back([&, d] {
      auto client = StoreClient::connect(at, milliseconds(10000));
      ASSERT_TRUE(client.ok());
      r->clients[size_t(d)] = std::move(*client);
      GroupCommOptions go;
      go.group = "ep/t0";
      go.rank = d;
      go.size = size;
      go.abort = &r->aborts[size_t(d)].get();
      go.label = "expert-parallel";
      auto comm = connect_group_comm(go, *r->clients[size_t(d)]);
      ASSERT_TRUE(comm.ok()) << comm.error().message;
      r->ep_comms[size_t(d)] = std::move(*comm);
      LoadOptions lo = test::fixture_options(fixture, 1);
      lo.expert_parallel = true;
      lo.dp_rank = d;
      lo.dp_size = size;
      lo.ep_comm = r->ep_comms[size_t(d)].get();
      auto lm = load_model(lo);
      ASSERT_TRUE(lm.ok()) << lm.error().message;
      r->models[size_t(d)] = std::move(*lm);
      auto ls = DpLockstep::connect(lockstep_options(at, d, size, &r->aborts[size_t(d)].get()));
      ASSERT_TRUE(ls.ok()) << ls.error().message;
      lockstep[size_t(d)] = std::move(*ls);
    });
  for (auto& t : threads) t.join();
  for (int d = 0; d < size; ++d)
    if (!lockstep[size_t(d)]) return nullptr;
  EngineClientOptions o = ep_options(*r->models[0]->model);
  for (int d = 0; d < size; ++d) {
    CausalLM& m = *r->models[size_t(d)]->model;
    o.executors.push_back(std::make_unique<InProcessExecutor>(
        m, o.scheduler.num_blocks, o.scheduler.block_size, speculation(m, o.scheduler, spec)));
    o.lockstep.push_back(std::move(lockstep[size_t(d)]));
  }
  if (spec) o.scheduler.num_lookahead_tokens = spec->num_lookahead_tokens();
  r->client = std::make_unique<EngineClient>(nullptr, std::move(o));
  return r;
}

std::vector<std::vector<int32_t>> prompts(int n) {
  std::mt19937 rng(91);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 3 + 7 * i; ++k)
      p.push_back(std::uniform_int_distribution<int32_t>(3, 120)(rng));
    out.push_back(std::move(p));
  }
  return out;
}

// What one process (all experts, no lockstep) gives the prompts.
std::vector<std::vector<int32_t>> one_process(const std::string& fixture,
                                              const std::vector<std::vector<int32_t>>& ps,
                                              int64_t max_tokens) {
  auto lm = test::load_fixture(fixture, 1);
  const auto one_owner = build_local_engine(*lm->model, nullptr, ep_options(*lm->model));
  EngineClient& one = *one_owner;
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& o : test::run_all(one, ps, max_tokens, "one"))
    out.push_back(o.token_ids);
  return out;
}

class ExpertParallelEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertParallelEngine, TokensEqualOneProcessUnderLoadAloneAndAcrossWaves) {
  const std::string fixture = GetParam();
  const auto ps = prompts(6);
  const auto want = one_process(fixture, ps, 10);
  auto two = ep_ranks(fixture, 2);
  ASSERT_NE(two, nullptr);
  // All at once: both ranks busy, with batches of different sizes.
  const auto got = test::run_all(*two->client, ps, 10, "load");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].token_ids, want[i]) << "prompt " << i;
  const auto ranks = two->client->rank_stats();
  for (size_t r = 0; r < 2; ++r) EXPECT_GT(ranks[r].counters.generation_tokens, 0) << "rank " << r;
  // One at a time, with pauses: each request runs on one rank while the other idles, and every
  // request is a new wave.
  for (size_t i = 0; i < ps.size(); ++i) {
    std::this_thread::sleep_for(milliseconds(20));
    const auto alone = test::run_all(*two->client, {ps[i]}, 10, "alone" + std::to_string(i));
    EXPECT_EQ(alone[0].token_ids, want[i]) << "prompt " << i << " alone";
  }
  EXPECT_FALSE(two->client->stats().dead);
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, ExpertParallelEngine,
                         ::testing::Values("qwen3_moe_f32", "deepseek_v3_f32"));

TEST(ExpertParallelEngine, MtpDraftingOnEveryRankKeepsOneProcessesTokens) {
  const auto ps = prompts(5);
  const auto want = one_process("deepseek_v3_f32", ps, 12);
  auto two = ep_ranks("deepseek_v3_f32", 2, mtp_config());
  ASSERT_NE(two, nullptr);
  const auto got = test::run_all(*two->client, ps, 12, "mtp");
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].token_ids, want[i]) << "prompt " << i;
  EXPECT_GT(two->client->stats().counters.spec_decode.num_drafts, 0);
}

TEST(ExpertParallelEngine, AFailedGroupEndsTheRequestsWithItsError) {
  auto two = ep_ranks("qwen3_moe_f32", 2);
  ASSERT_NE(two, nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s =
        two->client->add_request(test::greedy_request("r" + std::to_string(i), {5, 6, 7}, 240));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  RequestOutput first = streams[0]->next();  // running now
  // What a peer whose engine failed publishes (here a third member of the notice board).
  auto peer = StoreSubscriber::connect(two->store->endpoint(), "peer", [](auto&, auto&) {});
  ASSERT_TRUE(peer.ok());
  auto probe = StoreClient::connect(two->store->endpoint(), milliseconds(3000));
  ASSERT_TRUE((*probe)->wait({subscribed_key("peer")}, milliseconds(3000)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = "injected: a peer's worker died";
  ASSERT_TRUE((*peer)->publish("fail", std::vector<char>(why.begin(), why.end())).ok());
  int errors = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestOutput all = i == 0 ? first : RequestOutput{};
    while (!all.finished()) all.merge(streams[i]->next());
    if (all.finish_reason == FinishReason::kError) {
      ++errors;
      EXPECT_NE(all.error.find(why), std::string::npos) << "[" << all.error << "]";
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(two->client->stats().dead);
  EXPECT_FALSE(two->client->add_request(test::greedy_request("late", {5}, 2)).ok());
}

}  // namespace
}  // namespace kestrel
