// Microbenchmarks of the Gated DeltaNet ops (cpu/gated_deltanet.h) at Qwen3.5-35B-A3B's linear
// layer shape: 16 key heads and 32 value heads of 128, conv kernel 4 over 8192 channels, bf16
// activations.
//
// Run:   ./build-bench/bench/kernels/gated_deltanet_bench --benchmark_min_time=0.1
// Case names read gdn/<conv|rule>/<isa>/tokens:<n>/threads:<n>: one sequence of n tokens
// continuing from its state (a prefill chunk; tokens:1 is a decode step). items/s = tokens per
// second; us/token-head = microseconds per token and value head on one thread's share.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gated_deltanet.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_scratch.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {
namespace {

constexpr int kKeyHeads = 16, kValueHeads = 32, kConvKernel = 4;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kKeyDim = kKeyHeads * kHeadDim, kValueDim = kValueHeads * kHeadDim;
constexpr int64_t kChannels = 2 * kKeyDim + kValueDim;

std::vector<float> randn(size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// One sequence of `tokens` at positions 1.. (continuing), in state slot 0.
struct Sequence {
  std::vector<int32_t> qsl, positions, slots{0};
  explicit Sequence(int tokens) : qsl{0, tokens}, positions(size_t(tokens)) {
    for (int t = 0; t < tokens; ++t) positions[size_t(t)] = t + 1;
  }
  RecurrentBatch batch() const {
    RecurrentBatch b;
    b.num_seqs = 1;
    b.query_start_loc = qsl.data();
    b.positions = positions.data();
    b.state_slots = slots.data();
    return b;
  }
};

void bm_conv(benchmark::State& state, const char* isa) {
  const int tokens = int(state.range(0));
  ThreadPool pool(int(state.range(1)));
  set_linear_isa(isa);
  std::mt19937 rng(1);
  const std::vector<float> x = randn(size_t(tokens * kChannels), rng, 1.0f);
  const std::vector<float> w = randn(size_t(kChannels * kConvKernel), rng, 0.5f);
  std::vector<float> y(x.size()), states = randn(size_t(kChannels * (kConvKernel - 1)), rng, 1.0f);
  const Sequence seq(tokens);
  const CausalConv1d conv{.x = x.data(),
                          .weight = w.data(),
                          .channels = kChannels,
                          .kernel = kConvKernel,
                          .y = y.data(),
                          .states = {states.data(), int64_t(states.size()), 1},
                          .act = DType::BF16};
  for (auto _ : state) {
    causal_conv1d(conv, seq.batch(), pool);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
  set_linear_isa("auto");
}

void bm_rule(benchmark::State& state, const char* isa) {
  const int tokens = int(state.range(0));
  ThreadPool pool(int(state.range(1)));
  ThreadScratch scratch(pool.size());
  set_linear_isa(isa);
  std::mt19937 rng(2);
  const std::vector<float> x = randn(size_t(tokens * kChannels), rng, 1.0f);
  const std::vector<float> b = randn(size_t(tokens * kValueHeads), rng, 1.0f);
  const std::vector<float> a = randn(size_t(tokens * kValueHeads), rng, 1.0f);
  const std::vector<float> dt_bias = randn(kValueHeads, rng, 1.0f);
  const std::vector<float> decay_rate(kValueHeads, -0.5f);
  std::vector<float> out(size_t(tokens * kValueDim));
  std::vector<float> states = randn(size_t(kValueHeads * kHeadDim * kHeadDim), rng, 0.1f);
  const Sequence seq(tokens);
  const GatedDeltaRule rule{.q = x.data(),
                            .k = x.data() + kKeyDim,
                            .v = x.data() + 2 * kKeyDim,
                            .stride = kChannels,
                            .b = b.data(),
                            .a = a.data(),
                            .dt_bias = dt_bias.data(),
                            .decay_rate = decay_rate.data(),
                            .key_heads = kKeyHeads,
                            .value_heads = kValueHeads,
                            .key_dim = kHeadDim,
                            .value_dim = kHeadDim,
                            .out = out.data(),
                            .states = {states.data(), int64_t(states.size()), 1},
                            .act = DType::BF16};
  for (auto _ : state) {
    gated_delta_rule(rule, seq.batch(), pool, scratch);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
  state.counters["us/token-head"] = benchmark::Counter(
      double(tokens) * kValueHeads / double(state.range(1)) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  set_linear_isa("auto");
}

void register_all() {
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    auto* conv =
        benchmark::RegisterBenchmark((std::string("gdn/conv/") + isa).c_str(), bm_conv, isa);
    auto* rule =
        benchmark::RegisterBenchmark((std::string("gdn/rule/") + isa).c_str(), bm_rule, isa);
    for (auto* bm : {conv, rule}) {
      bm->ArgNames({"tokens", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t tokens : {1, 512})
        for (int64_t threads : {1, 2}) bm->Args({tokens, threads});
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu

int main(int argc, char** argv) {
  kestrel::cpu::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
