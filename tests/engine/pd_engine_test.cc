// Prefill/decode disaggregation between two engines in this process, over real TCP on loopback:
// a producer (kv_producer) prefills with do_remote_decode and answers with kv_transfer_params;
// a consumer (kv_consumer) given those params loads the prompt's KV from the producer's KV
// server and decodes. The consumer's tokens equal a colocated engine's (dense and MLA fixtures,
// one at a time and all at once), a consumer-side prefix hit loads only the missing blocks, and
// every block comes back on both sides. Faults: a lease that lapses before the consumer reads,
// a producer that is gone, an abort mid-load — no wrong tokens, no leaked block, and by
// kv_load_failure_policy a local prefill (recompute) or a clean error (fail).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine_client.h"
#include "engine/engine_runs.h"
#include "engine/fixture_models.h"
#include "engine/kv_connector.h"
#include "kvx/kv_worker.h"
#include "kvx/tcp.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

int free_port() {
  auto l = TcpListener::listen("127.0.0.1", 0);
  EXPECT_TRUE(l.ok());
  return l.ok() ? l->port() : 0;
}

EngineClientOptions base_options(const CausalLM& model) {
  EngineClientOptions o = test::engine_options(64, true, 256);
  o.scheduler.num_blocks = 128;
  o.scheduler.kv_groups = model.kv_cache_layout(o.scheduler.block_size).groups;
  o.vocab_size = model.config().vocab_size;
  return o;
}

// One instance of a PD pair: its model, its engine with a connector, and its KV worker.
struct Instance {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<EngineClient> client;
  int port = 0;
};

Instance make_instance(const std::string& fixture, KvRole role, milliseconds lease,
                       KvLoadFailurePolicy policy = KvLoadFailurePolicy::kRecompute,
                       milliseconds load_timeout = milliseconds(5000)) {
  Instance in;
  in.model = test::load_fixture(fixture, 1);
  CausalLM& m = *in.model->model;
  EngineClientOptions o = base_options(m);
  auto executor = std::make_unique<InProcessExecutor>(m, o.scheduler.num_blocks, 16);
  in.port = free_port();
  KvConnectorConfig cc;
  cc.transfer.connector = "MooncakeConnectorV1";
  cc.transfer.role = role;
  cc.transfer.lease_duration = lease;
  cc.transfer.load_timeout = load_timeout;
  cc.transfer.load_failure_policy = policy;
  cc.engine_id = role == KvRole::kProducer ? "p" : "d";
  cc.host = "127.0.0.1";
  cc.port = in.port;
  cc.block_size = 16;
  cc.epoch = std::random_device{}();
  auto connector = std::make_unique<KvConnector>(cc);
  const int heads = m.kv_cache_layout(16).groups[0].num_kv_heads;
  KvWorkerOptions wo;
  wo.self =
      model_kv_rank(m, executor->runner().kv_memory(), 16, cc.engine_id, cc.epoch, 0, 1, 0, heads);
  wo.serve = role != KvRole::kConsumer;
  wo.host = "127.0.0.1";
  wo.port = in.port;
  wo.control = connector->control();
  wo.pull = role != KvRole::kProducer;
  auto worker = KvWorker::start(executor->runner().kv_memory(), wo);
  EXPECT_TRUE(worker.ok()) << worker.error().message;
  if (worker.ok()) executor->runner().set_kv_worker(std::move(*worker));
  o.executors.push_back(std::move(executor));
  o.kv_connectors.push_back(std::move(connector));
  in.client = std::make_unique<EngineClient>(nullptr, std::move(o));
  return in;
}

RequestOutput run(EngineClient& c, GenerateRequest r) {
  auto s = c.add_request(std::move(r));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  RequestOutput all;
  if (!s.ok()) return all;
  while (!all.finished()) all.merge((*s)->next());
  return all;
}

// The producer's half: one token, and where the KV waits.
KvTransferResult prefill(Instance& p, const std::string& id, const std::vector<int32_t>& prompt) {
  GenerateRequest r = test::greedy_request(id, prompt, 1);
  r.engine.kv_transfer.do_remote_decode = true;
  const RequestOutput out = run(*p.client, r);
  EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
  EXPECT_TRUE(out.kv_transfer.has_value()) << id;
  return out.kv_transfer.value_or(KvTransferResult());
}

GenerateRequest decode_request(const std::string& id, const std::vector<int32_t>& prompt, int64_t n,
                               const KvTransferResult& params) {
  GenerateRequest r = test::greedy_request(id, prompt, n);
  r.engine.kv_transfer = remote_prefill_of(params);
  return r;
}

std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 5 + 13 * i; ++k)
      p.push_back(std::uniform_int_distribution<int32_t>(3, 120)(rng));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<int32_t> colocated(const std::string& fixture, const std::vector<int32_t>& prompt,
                               int64_t n) {
  auto lm = test::load_fixture(fixture, 1);
  const auto c_owner = build_local_engine(*lm->model, nullptr, base_options(*lm->model));
  EngineClient& c = *c_owner;
  return test::run_all(c, {prompt}, n, "ref")[0].token_ids;
}

// Waits until the instance holds no KV block (leases released, requests gone).
bool drains(Instance& in, milliseconds limit = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (in.client->stats().kv_cache_usage == 0.0) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

class PdEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(PdEngine, TheConsumerDecodesWhatAColocatedEngineDoes) {
  const std::string fixture = GetParam();
  Instance p = make_instance(fixture, KvRole::kProducer, milliseconds(30000));
  Instance d = make_instance(fixture, KvRole::kConsumer, milliseconds(30000));
  const auto ps = prompts(4, 3);
  std::vector<std::vector<int32_t>> want;
  for (const auto& pr : ps) want.push_back(colocated(fixture, pr, 8));
  // One at a time.
  for (size_t i = 0; i < ps.size(); ++i) {
    const KvTransferResult params = prefill(p, "p" + std::to_string(i), ps[i]);
    EXPECT_EQ(params.num_prompt_tokens, int64_t(ps[i].size()));
    EXPECT_EQ(params.request_id, "p" + std::to_string(i));
    const RequestOutput out =
        run(*d.client, decode_request("d" + std::to_string(i), ps[i], 8, params));
    EXPECT_EQ(out.token_ids, want[i]) << "prompt " << i;
    EXPECT_FALSE(out.kv_transfer.has_value());
  }
  // All at once: prefills, then every decode together.
  std::vector<KvTransferResult> params;
  for (size_t i = 0; i < ps.size(); ++i)
    params.push_back(prefill(p, "q" + std::to_string(i), ps[i]));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < ps.size(); ++i) {
    auto s = d.client->add_request(decode_request("e" + std::to_string(i), ps[i], 8, params[i]));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    RequestOutput all;
    while (!all.finished()) all.merge(streams[i]->next());
    EXPECT_EQ(all.token_ids, want[i]) << "prompt " << i << " under load";
  }
  EXPECT_TRUE(drains(p)) << "the producer still holds blocks";
  EXPECT_TRUE(drains(d));
  const KvTransferStats ds = d.client->kv_stats();
  EXPECT_EQ(ds.loads, 8);
  EXPECT_EQ(ds.load_failures, 0);
  EXPECT_EQ(p.client->kv_stats().leases.released, 8);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PdEngine,
                         ::testing::Values("llama3_f32", "deepseek_v3_f32", "deepseek_v32_f32"));

TEST(PdEngineFaults, AConsumerPrefixHitLoadsOnlyTheMissingBlocks) {
  Instance p = make_instance("llama3_f32", KvRole::kProducer, milliseconds(30000));
  Instance d = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(30000));
  const std::vector<int32_t> prompt = prompts(4, 5)[3];  // 44 tokens: 3 blocks
  run(*d.client, decode_request("d1", prompt, 2, prefill(p, "p1", prompt)));
  EXPECT_EQ(d.client->kv_stats().blocks_loaded, 3);
  // The same prompt again: its first two blocks are cached here now.
  const RequestOutput again =
      run(*d.client, decode_request("d2", prompt, 4, prefill(p, "p2", prompt)));
  EXPECT_EQ(again.token_ids, colocated("llama3_f32", prompt, 4));
  EXPECT_EQ(again.num_cached_tokens, 32);
  EXPECT_EQ(d.client->kv_stats().blocks_loaded, 3 + 1);  // only the last block this time
  EXPECT_TRUE(drains(p));
}

TEST(PdEngineFaults, ALeaseThatLapsesBeforeTheReadIsNeverUsed) {
  // The lease lasts 300 ms; the consumer comes 900 ms later: its read may see reused blocks,
  // so the release's answer (not whole) voids it.
  Instance p = make_instance("llama3_f32", KvRole::kProducer, milliseconds(300));
  Instance d = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(300));
  const auto ps = prompts(3, 7);
  const KvTransferResult params = prefill(p, "p1", ps[2]);
  std::this_thread::sleep_for(milliseconds(900));
  EXPECT_TRUE(drains(p, milliseconds(100))) << "the lapsed lease still holds its blocks";
  EXPECT_EQ(p.client->kv_stats().leases.expired, 1);
  // Other prompts reuse the producer's blocks meanwhile.
  prefill(p, "p2", ps[1]);
  const RequestOutput out = run(*d.client, decode_request("d1", ps[2], 6, params));
  EXPECT_EQ(out.token_ids, colocated("llama3_f32", ps[2], 6)) << "computed here, not read";
  const KvTransferStats s = d.client->kv_stats();
  EXPECT_EQ(s.load_failures, 1);
  EXPECT_EQ(s.recomputes, 1);
  EXPECT_TRUE(drains(d));
}

TEST(PdEngineFaults, AGoneProducerFailsTheLoadToALocalPrefillOrACleanError) {
  const auto ps = prompts(2, 9);
  KvTransferResult params;
  {
    Instance p = make_instance("llama3_f32", KvRole::kProducer, milliseconds(30000));
    params = prefill(p, "p1", ps[1]);
  }  // the producer stops
  Instance d = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(30000));
  const RequestOutput out = run(*d.client, decode_request("d1", ps[1], 5, params));
  EXPECT_EQ(out.token_ids, colocated("llama3_f32", ps[1], 5));
  EXPECT_EQ(d.client->kv_stats().recomputes, 1);
  Instance f = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(30000),
                             KvLoadFailurePolicy::kFail);
  const RequestOutput failed = run(*f.client, decode_request("f1", ps[1], 5, params));
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.error.find("KV load from the prefill instance failed"), std::string::npos)
      << failed.error;
  EXPECT_TRUE(failed.token_ids.empty());
  EXPECT_TRUE(drains(d));
  EXPECT_TRUE(drains(f));
}

TEST(PdEngineFaults, AnAbortMidLoadLeaksNothingOnEitherSide) {
  Instance p = make_instance("llama3_f32", KvRole::kProducer, milliseconds(30000));
  Instance d = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(30000));
  const auto ps = prompts(4, 11);
  for (int i = 0; i < 6; ++i) {
    const auto& pr = ps[size_t(i) % ps.size()];
    const KvTransferResult params = prefill(p, "p" + std::to_string(i), pr);
    auto s = d.client->add_request(decode_request("d" + std::to_string(i), pr, 50, params));
    ASSERT_TRUE(s.ok());
    if (i % 2 == 0) std::this_thread::sleep_for(milliseconds(i));
    d.client->abort("d" + std::to_string(i));
    RequestOutput all;
    while (!all.finished()) all.merge((*s)->next());
  }
  EXPECT_TRUE(drains(d)) << "the consumer leaked blocks";
  EXPECT_TRUE(drains(p)) << "the producer still holds blocks";
}

TEST(PdEngineFaults, BadParamsAreRefusedUpFront) {
  Instance d = make_instance("llama3_f32", KvRole::kConsumer, milliseconds(30000));
  Instance p = make_instance("llama3_f32", KvRole::kProducer, milliseconds(30000));
  const auto ps = prompts(2, 13);
  KvTransferResult params = prefill(p, "p1", ps[1]);
  // Another prompt than the one prefilled.
  auto wrong = d.client->add_request(decode_request("d1", ps[0], 4, params));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("prefilled 18 prompt tokens"), std::string::npos)
      << wrong.error().message;
  // A role this instance lacks.
  GenerateRequest r = test::greedy_request("d2", ps[1], 1);
  r.engine.kv_transfer.do_remote_decode = true;
  EXPECT_FALSE(d.client->add_request(r).ok());
  // The lease of a refused request is released at once.
  EXPECT_TRUE(drains(p));
}

// The recompute scheduler of a decode instance: with too few blocks for both requests, the
// newer one ends with stop_reason "recomputed" after the tokens it has, the other finishes whole,
// and every block comes back.
TEST(PdEngineFaults, ADecodeShortOfBlocksGivesTheRequestBack) {
  auto model = test::load_fixture("llama3_f32", 1);
  EngineClientOptions o = base_options(*model->model);
  o.scheduler.num_blocks = 9;  // 8 usable blocks of 16 tokens
  o.scheduler.max_model_len = 128;
  o.scheduler.give_back_preempted = true;
  // Slow steps: "b" arrives long before "a" holds so many blocks that "b" could only wait.
  o.executors.push_back(std::make_unique<test::SlowExecutor>(*model->model, o.scheduler));
  const auto client_owner = std::make_unique<EngineClient>(nullptr, std::move(o));
  EngineClient& client = *client_owner;
  const auto ps = prompts(2, 17);
  auto first = client.add_request(test::greedy_request("a", ps[0], 90));
  auto second = client.add_request(test::greedy_request("b", ps[1], 90));
  ASSERT_TRUE(first.ok() && second.ok());
  RequestOutput a, b;
  while (!a.finished()) a.merge((*first)->next());
  while (!b.finished()) b.merge((*second)->next());
  EXPECT_EQ(a.finish_reason, FinishReason::kLength);
  EXPECT_EQ(a.token_ids.size(), 90u);
  EXPECT_EQ(b.finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(b.stop_reason), "recomputed");
  EXPECT_LT(b.token_ids.size(), 90u);
  EXPECT_EQ(client.rank_stats()[0].kv_cache_usage, 0.0);
}

}  // namespace
}  // namespace kestrel
