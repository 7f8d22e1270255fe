// Kestrel's f32 linear() (with the float-panel copy the CPU backend attaches under AVX-512)
// against OpenBLAS sgemm at issue 18's shapes, 1 and 2 threads, for speed
// and for batch invariance: y = x · Wᵀ with W [N, K] row-major (as Kestrel stores weights).
//
// Run:   ./build-bench/bench/kernels/blas_bench --benchmark_min_time=0.1
// Cases: gemm/<kestrel|openblas>/<N>x<K>/M:<rows>/threads:<n>. Columns: GMAC/s, and rows_invariant
// = 1 when output rows 0, M/2 and M-1 are bit-identical to the same rows computed alone (M = 1), 0
// otherwise: a kernel whose reduction order over K depends on M or on the row's place in a tile
// fails it (three rows sampled, not a proof of invariance).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/float_panels.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

extern "C" void openblas_set_num_threads(int);

namespace kestrel::cpu {
namespace {

struct Problem {
  int64_t n, k, m;
  HostBuffer w;
  std::vector<float> x, y, y1;
  std::unique_ptr<CpuLinearPlan> plan;  // the plan a CPU backend makes (float panels on AVX-512)
  LinearWeight packed;                  // w with that plan
};

Problem make_problem(int64_t n, int64_t k, int64_t m) {
  Problem p{n, k, m, HostBuffer(DType::F32, {n, k}), {}, {}, {}, nullptr, {}};
  std::minstd_rand rng(uint32_t(n * 31 + k));
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  auto* w = static_cast<float*>(p.w.data());
  for (int64_t i = 0; i < n * k; ++i) w[i] = ud(rng);
  p.x.resize(size_t(m * k));
  for (float& v : p.x) v = ud(rng);
  p.y.resize(size_t(m * n));
  p.y1.resize(size_t(n));
  p.packed = LinearWeight{p.w.view()};
  p.plan = make_linear_plan(p.packed.w, QuantCompute::kInt8, DType::F32);
  p.packed.plan = p.plan.get();
  return p;
}

// What serving runs: linear() over the weight as prepare_weight leaves it.
void run_kestrel(Problem& p, const float* x, int64_t m, float* y, ThreadPool& pool,
                 ThreadScratch& scratch) {
  linear(p.packed, x, m, y, pool, QuantCompute::kInt8, &scratch);
}

void run_openblas(Problem& p, const float* x, int64_t m, float* y, ThreadPool&, ThreadScratch&) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(p.n), int(p.k), 1.0f, x,
              int(p.k), static_cast<const float*>(p.w.data()), int(p.k), 0.0f, y, int(p.n));
}

template <auto Run>
void bm_gemm(benchmark::State& state, int64_t n, int64_t k) {
  const int64_t m = state.range(0);
  Problem p = make_problem(n, k, m);
  ThreadPool pool(int(state.range(1)));
  ThreadScratch scratch(pool.size());  // the backend's, kept across calls
  openblas_set_num_threads(int(state.range(1)));
  for (auto _ : state) {
    Run(p, p.x.data(), m, p.y.data(), pool, scratch);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  bool same = true;
  for (const int64_t r : {int64_t{0}, m / 2, m - 1}) {
    Run(p, p.x.data() + r * k, 1, p.y1.data(), pool, scratch);
    same = same && std::memcmp(p.y.data() + r * n, p.y1.data(), size_t(n) * sizeof(float)) == 0;
  }
  state.counters["rows_invariant"] = same ? 1 : 0;
  state.counters["GMAC/s"] =
      benchmark::Counter(double(m * n * k) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const int64_t shapes[][2] = {{1536, 576}, {4096, 4096}};
  for (const auto& s : shapes) {
    const std::string shape = std::to_string(s[0]) + "x" + std::to_string(s[1]);
    auto* a = benchmark::RegisterBenchmark(("gemm/kestrel/" + shape).c_str(), bm_gemm<run_kestrel>,
                                           s[0], s[1]);
    auto* b = benchmark::RegisterBenchmark(("gemm/openblas/" + shape).c_str(),
                                           bm_gemm<run_openblas>, s[0], s[1]);
    for (auto* bm : {a, b}) {
      bm->ArgNames({"M", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t m : {1, 16, 64, 512})
        for (int64_t threads : {1, 2}) bm->Args({m, threads});
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  kestrel::cpu::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
