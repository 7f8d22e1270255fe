// The mp executor with real worker processes: a tensor-parallel group of 2 or 4 ranks (forked
// workers, shared-memory collectives, the ZeroMQ control channel) gives the tokens of one
// process — greedy and seeded sampling, batched, chunked, with n-gram drafts — and frees every
// block; a worker that dies fails the group within seconds, naming the rank, instead of
// hanging; a worker that cannot build its runner fails the start with its reason.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "distributed/host_comm.h"
#include "distributed/shared_flag.h"
#include "distributed/shm_comm.h"
#include "engine/engine_core.h"
#include "engine/engine_runs.h"
#include "engine/fixture_models.h"
#include "engine/multiproc_executor.h"
#include "engine/worker_processes.h"
#include "model/loader.h"
#include "spec_decode/proposer.h"
#include "spec_decode/speculative_config.h"
#include "test_paths.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;

constexpr int kOutputs = 16;

LoadOptions load_options(const std::string& fixture, int rank, int size, DeviceComm* comm) {
  LoadOptions o = test::fixture_options(fixture, 1);
  o.tp_rank = rank;
  o.tp_size = size;
  o.tp_comm = comm;
  return o;
}

SchedulerConfig scheduler_config(const CausalLM& model, int64_t budget) {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 256;
  c.max_model_len = 128;
  c.max_num_batched_tokens = budget;
  c.kv_groups = model.kv_cache_layout(c.block_size).groups;
  return c;
}

std::optional<SpeculativeConfig> ngram_config() {
  auto parsed = parse_speculative_config(
      R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3})");
  EXPECT_TRUE(parsed.ok() && parsed->has_value());
  SpeculativeConfig s = **parsed;
  EXPECT_TRUE(resolve_speculative_config(s, 0, "llama").ok());
  return s;
}

// A rank's runner; with `spec`, its n-gram proposer.
Expected<std::unique_ptr<ModelRunner>> make_runner(CausalLM& model, const SchedulerConfig& c,
                                                   const std::optional<SpeculativeConfig>& spec) {
  Speculation s;
  if (spec) {
    ProposerOptions po;
    po.config = *spec;
    po.max_model_len = c.max_model_len;
    po.num_blocks = c.num_blocks;
    po.block_size = c.block_size;
    KASSIGN(s.proposer, make_proposer(model, po));
    s.max_drafting_requests = 64;
  }
  return std::make_unique<ModelRunner>(model, model.make_kv_cache(c.num_blocks, c.block_size),
                                       std::move(s));
}

// A worker's runner as an executor.
class RunnerExecutor final : public Executor {
 public:
  explicit RunnerExecutor(std::unique_ptr<ModelRunner> r) : runner_(std::move(r)) {}
  Expected<RunnerOutput> execute(const SchedulerOutput& output) override {
    return runner_->execute(output);
  }

 private:
  std::unique_ptr<ModelRunner> runner_;
};

enum class Fault { kNone, kRunnerFails };

// A group under test: rank 0 here (its comm and model outlive the engine), workers forked.
struct Group {
  std::unique_ptr<ShmComm> comm;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<EngineCore> engine;
  pid_t worker_pid = 0;  // rank 1's
};

std::string unique_tag() {
  static int n = 0;
  return "kestrel-test-tp-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

Expected<Group> start_group(const std::string& fixture, int size, int64_t budget,
                            const std::optional<SpeculativeConfig>& spec,
                            Fault fault = Fault::kNone, std::atomic<bool>* group_abort = nullptr) {
  const std::string tag = unique_tag();
  const std::string shm = "/" + tag, endpoint = "ipc:///tmp/" + tag + ".sock";
  auto connect = [&](int rank, const std::atomic<bool>* abort) {
    ShmCommOptions co;
    co.name = shm;
    co.rank = rank;
    co.size = size;
    co.timeout = milliseconds(20000);
    co.abort = abort;
    return ShmComm::connect(co);
  };
  KASSIGN(auto workers,
          WorkerProcesses::spawn(
              size - 1,
              [&](int rank) {
                auto comm = connect(rank, nullptr);
                if (!comm.ok()) return 3;
                auto leader = HostCommWorker::connect(endpoint, rank);
                if (!leader.ok()) return 4;
                auto lm = load_model(load_options(fixture, rank, size, comm->get()));
                if (!lm.ok()) return 5;
                CausalLM& model = *(*lm)->model;
                return run_worker(
                    **leader, [&](const WorkerKvPlan&) -> Expected<std::unique_ptr<Executor>> {
                      if (fault == Fault::kRunnerFails)
                        return make_error("no memory for the KV cache (injected)");
                      KASSIGN(auto runner,
                              make_runner(model, scheduler_config(model, budget), spec));
                      return std::unique_ptr<Executor>(
                          std::make_unique<RunnerExecutor>(std::move(runner)));
                    });
              },
              group_abort));
  Group g;
  g.worker_pid = workers->pid(1);
  // Rank 0's collectives give up on the wider group's flag when there is one (as under expert
  // parallelism), else on its own workers'.
  KASSIGN(g.comm, connect(0, group_abort ? group_abort : &workers->abort_flag()));
  KASSIGN(g.model, load_model(load_options(fixture, 0, size, g.comm.get())));
  CausalLM& model = *g.model->model;
  SchedulerConfig c = scheduler_config(model, budget);
  if (spec) c.num_lookahead_tokens = spec->num_lookahead_tokens();
  KASSIGN(auto leader, HostCommLeader::bind(endpoint, size - 1));
  KTRY(leader->wait_for_workers(milliseconds(30000), [&] { return workers->check(); }));
  KASSIGN(auto runner, make_runner(model, c, spec));
  KASSIGN(auto executor,
          MultiprocExecutor::start(std::move(workers), std::move(leader), std::move(runner),
                                   WorkerKvPlan{c.num_blocks}, milliseconds(30000)));
  g.engine = std::make_unique<EngineCore>(std::move(executor), c, std::vector<int32_t>{});
  return g;
}

std::vector<std::vector<int32_t>> prompts() {
  std::mt19937 rng(20261202);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 5 + 6 * i; ++k)
      p.push_back(std::uniform_int_distribution<int32_t>(3, 500)(rng));
    if (i % 2 == 0) p.insert(p.end(), p.begin(), p.begin() + 4);  // a repeat n-grams find
    out.push_back(std::move(p));
  }
  return out;
}

// Greedy requests and two seeded sampled ones.
std::vector<EngineRequest> requests() {
  std::vector<EngineRequest> out;
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    EngineRequest r = test::greedy_core_request("p" + std::to_string(i), ps[i], kOutputs);
    if (i >= 4) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.9f;
      r.seed = 1000 + i;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::map<std::string, std::vector<int32_t>> run(EngineCore& e) {
  for (const EngineRequest& r : requests()) EXPECT_TRUE(e.add_request(r).ok());
  std::map<std::string, std::vector<int32_t>> out;
  for (int steps = 0; e.has_unfinished() && steps < 2000; ++steps) {
    auto outs = e.step();
    EXPECT_TRUE(outs.ok()) << (outs.ok() ? "" : outs.error().message);
    if (!outs.ok()) break;
    for (const EngineCoreOutput& o : *outs) {
      EXPECT_NE(o.finish_reason, FinishReason::kError) << o.error;
      auto& t = out[test::name_of(o.id)];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  EXPECT_FALSE(e.has_unfinished());
  return out;
}

std::map<std::string, std::vector<int32_t>> one_process(const std::string& fixture,
                                                        int64_t budget) {
  auto lm = load_model(load_options(fixture, 0, 1, nullptr));
  EXPECT_TRUE(lm.ok());
  const auto e_core = build_local_core(*(*lm)->model, scheduler_config(*(*lm)->model, budget), {});
  EngineCore& e = *e_core;
  return run(e);
}

class MultiprocExecutorTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, int64_t, bool>> {};

TEST_P(MultiprocExecutorTest, TokensEqualOneProcess) {
  const auto [fixture, size, budget, ngram] = GetParam();
  const auto want = one_process(fixture, budget);
  ASSERT_EQ(want.size(), 6u);
  auto g = start_group(fixture, size, budget, ngram ? ngram_config() : std::nullopt);
  ASSERT_TRUE(g.ok()) << g.error().message;
  const auto got = run(*g->engine);
  for (const auto& [name, tokens] : want) {
    EXPECT_EQ(tokens.size(), size_t(kOutputs)) << name;
    EXPECT_EQ(got.count(name) ? got.at(name) : std::vector<int32_t>{}, tokens)
        << name << " on " << size << " ranks";
  }
  if (ngram) {
    EXPECT_GT(g->engine->counters().spec_decode.num_drafts, 0);
  }
  EXPECT_EQ(g->engine->scheduler().kv().usage(), 0.0);
  EXPECT_FALSE(g->engine->executor().failure());
}

INSTANTIATE_TEST_SUITE_P(Groups, MultiprocExecutorTest,
                         ::testing::Values(std::make_tuple("llama3_f32", 2, 512, false),
                                           std::make_tuple("qwen3_f32", 4, 512, false),
                                           std::make_tuple("qwen2_f32", 2, 7,
                                                           false),  // prompts in chunks
                                           std::make_tuple("llama3_f32", 2, 512, true),
                                           std::make_tuple("qwen3_moe_f32", 2, 512, false)));

TEST(MultiprocExecutor, AWorkerThatDiesFailsTheGroupWithinSeconds) {
  auto g = start_group("llama3_f32", 2, 512, std::nullopt);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EngineCore& e = *g->engine;
  for (const EngineRequest& r : requests()) ASSERT_TRUE(e.add_request(r).ok());
  ASSERT_TRUE(e.step().ok());  // the group runs
  ASSERT_EQ(kill(g->worker_pid, SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  Expected<std::vector<EngineCoreOutput>> step = std::vector<EngineCoreOutput>{};
  while (step.ok() && e.has_unfinished()) step = e.step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(step.ok()) << "the engine kept stepping without its worker";
  EXPECT_NE(step.error().message.find("worker rank 1"), std::string::npos) << step.error().message;
  EXPECT_LT(seconds, 5.0);
  ASSERT_TRUE(e.executor().failure().has_value());
  // The failed step's requests are ended and their blocks freed; later steps fail at once.
  EXPECT_EQ(e.scheduler().kv().usage(), 0.0);
  EXPECT_FALSE(e.executor().failure()->empty());
}

TEST(MultiprocExecutor, AWorkerThatDiesWhileIdleIsNoticedWithoutAStep) {
  auto g = start_group("llama3_f32", 2, 512, std::nullopt);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_EQ(kill(g->worker_pid, SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!g->engine->executor().failure() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(g->engine->executor().failure().has_value());
  EXPECT_NE(g->engine->executor().failure()->find("killed by signal 9"), std::string::npos)
      << *g->engine->executor().failure();
}

// A worker that waits in a collective with a failed rank of the wider group (here: stopped, so
// alive and silent) must not hold rank 0's step for the step timeout once the group aborts,
// nor its shutdown for the exit grace.
TEST(MultiprocExecutor, AStepWaitingOnAStuckWorkerEndsWhenTheWiderGroupAborts) {
  SharedFlag group_abort;
  auto g = start_group("llama3_f32", 2, 512, std::nullopt, Fault::kNone, &group_abort.get());
  ASSERT_TRUE(g.ok()) << g.error().message;
  EngineCore& e = *g->engine;
  for (const EngineRequest& r : requests()) ASSERT_TRUE(e.add_request(r).ok());
  ASSERT_TRUE(e.step().ok());
  ASSERT_EQ(kill(g->worker_pid, SIGSTOP), 0);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    group_abort.set();
  });
  const auto start = std::chrono::steady_clock::now();
  auto step = e.step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  aborter.join();
  ASSERT_FALSE(step.ok()) << "the step ran without its worker";
  EXPECT_NE(step.error().message.find("aborted"), std::string::npos) << step.error().message;
  EXPECT_LT(seconds, 5.0);
  const auto stop = std::chrono::steady_clock::now();
  g->engine.reset();  // kills the stopped worker at once
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - stop).count(), 2.0);
  int status = 0;
  EXPECT_EQ(waitpid(g->worker_pid, &status, WNOHANG), -1) << "the worker was not reaped";
}

TEST(MultiprocExecutor, AWorkerThatCannotBuildItsRunnerFailsTheStartWithItsReason) {
  auto g = start_group("llama3_f32", 2, 512, std::nullopt, Fault::kRunnerFails);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("worker rank 1 could not start: no memory for the KV cache"),
            std::string::npos)
      << g.error().message;
}

}  // namespace
}  // namespace kestrel
