// oneDNN's matmul (Debian's libdnnl, the library vLLM's CPU backend calls) at the shapes of
// matmul_bench and blas_bench, for issue 18's measured decision: is there a library Kestrel should
// call for f32, bf16 or int8 GEMM? y = x · Wᵀ with W [N, K] row-major, as Kestrel stores weights.
// Best case for the library: one primitive per (dtype, shape, M), weights reordered once into the
// layout the primitive asks for (what a serving engine would cache), activations already in the
// source dtype. Run beside matmul_bench's f32/bf16_amx/q8_0_packed cases, alternating.
//
// Run:   OMP_PROC_BIND=close ./build-bench/bench/kernels/dnnl_bench --benchmark_min_time=0.2
// Cases: gemm/onednn/<f32|bf16|int8>/<N>x<K>/M:<rows>/threads:<n>. Columns: GMAC/s, and
// rows_invariant = 1 when output rows 0, M/2 and M-1 equal bit for bit the same rows computed by a
// primitive for M = 1 (the decode step of the same request), 0 otherwise.
// invariance/onednn/<dtype>/<N>x<K>/threads:<n> checks every row of 69 batch sizes instead.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

struct Kind {
  const char* name;
  dt src, weights;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Random source bytes for any of the dtypes: f32 in [-1, 1), bf16 as the top half of such an f32,
// int8 codes in [-64, 64) (u8 sources in [0, 128)).
void fill(memory& m, dt t, size_t elems, uint32_t seed) {
  std::minstd_rand rng(seed);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  auto* p = static_cast<uint8_t*>(m.get_data_handle());
  for (size_t i = 0; i < elems; ++i) {
    const float f = ud(rng);
    if (t == dt::f32) {
      std::memcpy(p + 4 * i, &f, 4);
    } else if (t == dt::bf16) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      const uint16_t h = uint16_t(b >> 16);
      std::memcpy(p + 2 * i, &h, 2);
    } else if (t == dt::s8) {
      p[i] = uint8_t(int8_t(f * 64));
    } else {
      p[i] = uint8_t((f + 1.0f) * 64);
    }
  }
}

// One matmul primitive for M rows, with the weights reordered into its preferred layout.
struct Gemm {
  dnnl::matmul prim;
  memory src, weights, dst;
};

Gemm make_gemm(const Kind& kind, int64_t m, int64_t n, int64_t k, const memory& w_user) {
  const memory::desc a({m, k}, kind.src, tag::ab);
  const memory::desc b({k, n}, kind.weights, tag::any);
  const memory::desc c({m, n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (kind.weights == dt::s8) attr.set_output_scales(0, {1.0f / 4096});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  Gemm g{dnnl::matmul(pd), memory(pd.src_desc(), engine()), memory(pd.weights_desc(), engine()),
         memory(pd.dst_desc(), engine())};
  dnnl::stream s(engine());
  dnnl::reorder(w_user, g.weights).execute(s, const_cast<memory&>(w_user), g.weights);
  s.wait();
  return g;
}

void run(Gemm& g) {
  dnnl::stream s(engine());
  g.prim.execute(s, {{DNNL_ARG_SRC, g.src}, {DNNL_ARG_WEIGHTS, g.weights}, {DNNL_ARG_DST, g.dst}});
  s.wait();
}

void bm_gemm(benchmark::State& state, Kind kind, int64_t n, int64_t k) {
  const int64_t m = state.range(0);
  omp_set_num_threads(int(state.range(1)));
  // W [N, K] row-major is the [K, N] matrix in format ba.
  memory w_user(memory::desc({k, n}, kind.weights, tag::ba), engine());
  fill(w_user, kind.weights, size_t(n * k), uint32_t(n * 31 + k));
  Gemm g = make_gemm(kind, m, n, k, w_user);
  fill(g.src, kind.src, size_t(m * k), 7);
  for (auto _ : state) {
    run(g);
    benchmark::ClobberMemory();
  }
  // Each sampled row again through the M = 1 primitive.
  Gemm one = make_gemm(kind, 1, n, k, w_user);
  const size_t es = kind.src == dt::f32 ? 4 : kind.src == dt::bf16 ? 2 : 1;
  const auto* y = static_cast<const float*>(g.dst.get_data_handle());
  bool same = true;
  for (const int64_t r : {int64_t{0}, m / 2, m - 1}) {
    std::memcpy(one.src.get_data_handle(),
                static_cast<const uint8_t*>(g.src.get_data_handle()) + size_t(r * k) * es,
                size_t(k) * es);
    run(one);
    same = same && std::memcmp(y + r * n, one.dst.get_data_handle(), size_t(n) * 4) == 0;
  }
  state.counters["rows_invariant"] = same ? 1 : 0;
  state.counters["GMAC/s"] =
      benchmark::Counter(double(m * n * k) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Invariance beyond the timed batches: for M = 2 .. 64 and a few larger batches, whether every
// row of the M-row primitive equals the M = 1 primitive's result for that row. Counters:
// batches_tested, batches_invariant, first_variant_m (0 when every batch matched).
void bm_invariance(benchmark::State& state, Kind kind, int64_t n, int64_t k) {
  omp_set_num_threads(int(state.range(0)));
  memory w_user(memory::desc({k, n}, kind.weights, tag::ba), engine());
  fill(w_user, kind.weights, size_t(n * k), uint32_t(n * 31 + k));
  std::vector<int64_t> batches;
  for (int64_t m = 2; m <= 64; ++m) batches.push_back(m);
  for (int64_t m : {96, 128, 200, 256, 384, 512}) batches.push_back(m);
  const size_t es = kind.src == dt::f32 ? 4 : kind.src == dt::bf16 ? 2 : 1;
  int tested = 0, invariant = 0;
  int64_t first_variant = 0;
  for (auto _ : state) {
    Gemm one = make_gemm(kind, 1, n, k, w_user);
    for (int64_t m : batches) {
      Gemm g = make_gemm(kind, m, n, k, w_user);
      fill(g.src, kind.src, size_t(m * k), uint32_t(m));
      run(g);
      const auto* y = static_cast<const float*>(g.dst.get_data_handle());
      bool same = true;
      for (int64_t r = 0; r < m && same; ++r) {
        std::memcpy(one.src.get_data_handle(),
                    static_cast<const uint8_t*>(g.src.get_data_handle()) + size_t(r * k) * es,
                    size_t(k) * es);
        run(one);
        same = std::memcmp(y + r * n, one.dst.get_data_handle(), size_t(n) * 4) == 0;
      }
      ++tested;
      invariant += same ? 1 : 0;
      if (!same && first_variant == 0) first_variant = m;
    }
  }
  state.counters["batches_tested"] = tested;
  state.counters["batches_invariant"] = invariant;
  state.counters["first_variant_m"] = double(first_variant);
}

void register_all() {
  const Kind kinds[] = {
      {"f32", dt::f32, dt::f32}, {"bf16", dt::bf16, dt::bf16}, {"int8", dt::u8, dt::s8}};
  const int64_t shapes[][2] = {{1536, 576}, {4096, 4096}};
  for (const Kind& kind : kinds) {
    for (const auto& s : shapes) {
      const std::string name = std::string("gemm/onednn/") + kind.name + "/" +
                               std::to_string(s[0]) + "x" + std::to_string(s[1]);
      auto* bm = benchmark::RegisterBenchmark(name.c_str(), bm_gemm, kind, s[0], s[1]);
      bm->ArgNames({"M", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t m : {1, 16, 64, 512})
        for (int64_t threads : {1, 2}) bm->Args({m, threads});
    }
  }
  const int64_t model_shapes[][2] = {{960, 576},  {576, 576},   {3072, 576},
                                     {576, 1536}, {49152, 576}, {4096, 4096}};
  for (const Kind& kind : kinds) {
    for (const auto& s : model_shapes) {
      const std::string name = std::string("invariance/onednn/") + kind.name + "/" +
                               std::to_string(s[0]) + "x" + std::to_string(s[1]);
      auto* bm = benchmark::RegisterBenchmark(name.c_str(), bm_invariance, kind, s[0], s[1]);
      bm->ArgNames({"threads"})->Iterations(1)->Unit(benchmark::kMillisecond);
      for (int64_t threads : {1, 2}) bm->Args({threads});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
