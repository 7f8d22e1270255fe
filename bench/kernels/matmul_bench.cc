// Microbenchmarks of cpu::linear (y = x · Wᵀ) for each weight type at representative shapes.
//
// Run:   bench/kernels/run.sh --benchmark_filter=linear
//   or:  ./build-bench/bench/kernels/matmul_bench --benchmark_min_time=0.05
// Case names read linear/<type>/<N>x<K>/M:<rows of x>/threads:<pool size>, e.g.
// linear/q4_1_packed/1536x576/M:1/threads:2. Types: f16, bf16, q4_0, q4_1, q5_0, q8_0, mxfp4, q4_k,
// q6_k, q4_0/q4_1/q5_0/q8_0/q4_k/q6_k with a packed copy ("_packed", only where
// packed_weights_supported(); batches on AMX where packed_amx_active()), q4_1/q8_0 packed with AMX
// switched off ("_vnni"), and fp8 (F8_E4M3 with DeepSeek-V3's 128x128 block scales; random finite
// codes; "_packed": the FP8 panels of fp8_matmul.h), and w8a8 (I8 weights with a scale per row and
// activations quantized per token: msModelSlim's W8A8_DYNAMIC; "_packed": the panel GEMM of
// int8_matmul.h, AVX-512 VNNI or AVX2 as KESTREL_CPU_ISA selects, batches on AMX where
// packed_amx_active(); "_vnni": AMX off), and w4a8 (the same with int4 codes, packed as int4
// panels: msModelSlim's W4A8_DYNAMIC). f16/bf16 with float panels ("_packed", float_panels.h; same
// bytes per call as unpacked), and bf16 as AMX bf16 tiles with bf16 activations ("bf16_amx",
// bf16_tiles.h; where the CPU has it). Shapes: SmolLM2-135M's projections (576x576, 1536x576,
// 576x1536) and LM head (49152x576), and a 7B-like 4096x4096 (only 576x1536 and 4096x4096 for the
// K-quants, whose blocks are 256 wide); M = 1 is a decode step, M = 16 a decode batch, M = 64 and
// 512 are prefill chunks (issue 18's shapes; bench/kernels/peak_bench gives the per-core peaks to
// compare GMAC/s with).
//
// Columns: Time is wall time per call. items/s = rows of x (tokens) per second. GB/s = weight
// bytes read per call (the packed size for packed weights) over time — decode is bound by it.
// GMAC/s = M·N·K multiply-accumulates per second — prefill is bound by it. The context line
// "linear_isa" names the SIMD kernels linear() selected on this CPU; KESTREL_CPU_ISA caps them as
// it caps the engine's.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/float_panels.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/kquant_panels.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/packed_matmul.h"
#include "base/thread_pool.h"
#include "tensor/quant_formats.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {
namespace {

struct WeightType {
  const char* label;
  DType dtype;
  bool packed;
  bool amx = true;          // packed only: whether batches may run on AMX (where the CPU has it)
  bool bf16_tiles = false;  // BF16 packed as AMX bf16 tiles (a model with bf16 activations)
  bool int4 = false;        // I8 codes in [-8, 7] (W4A8), packed as int4 panels
};

struct MatShape {
  int64_t n, k;
};

// A random [N, K] weight of one type, plus its packed copy when asked for.
struct Weight {
  HostBuffer data;
  std::unique_ptr<CpuLinearPlan> plan;  // the packed kernel's plan, with its copy
  std::vector<float> block_scale;       // fp8: per 128x128 block; w8a8: per row
  LinearWeight tensor;
  size_t bytes_per_call = 0;  // what one linear() call reads from the weight
};

// Random finite FP8 codes (0x7F and 0xFF are NaN) and a scale per 128x128 block; the scales are
// read per call too.
void fill_fp8(Weight& w, const MatShape& shape, std::minstd_rand& rng) {
  constexpr int64_t kBlock = 128;
  std::uniform_int_distribution<int> code(0, 253);
  auto* dst = static_cast<uint8_t*>(w.data.data());
  for (int64_t i = 0; i < shape.n * shape.k; ++i) {
    const int c = code(rng);
    dst[i] = uint8_t(c < 0x7F ? c : c + 1);
  }
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  w.block_scale.resize(
      size_t(((shape.n + kBlock - 1) / kBlock) * ((shape.k + kBlock - 1) / kBlock)));
  for (float& s : w.block_scale) s = scale(rng);
  w.tensor.scales.block = w.block_scale.data();
  w.tensor.scales.block_rows = w.tensor.scales.block_cols = kBlock;
  w.bytes_per_call = w.tensor.nbytes() + w.block_scale.size() * sizeof(float);
}

// Random int8 (or int4) codes and a scale per row (read per call too).
void fill_int8(Weight& w, const MatShape& shape, bool int4, std::minstd_rand& rng) {
  std::uniform_int_distribution<int> code(int4 ? -8 : -127, int4 ? 7 : 127);
  auto* dst = static_cast<int8_t*>(w.data.data());
  for (int64_t i = 0; i < shape.n * shape.k; ++i) dst[i] = int8_t(code(rng));
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  w.block_scale.resize(size_t(shape.n));
  for (float& s : w.block_scale) s = scale(rng);
  w.tensor.scales.block = w.block_scale.data();
  w.tensor.scales.block_rows = 1;
  w.tensor.scales.block_cols = shape.k;
  w.bytes_per_call = w.tensor.nbytes() + w.block_scale.size() * sizeof(float);
}

// The plan of the row with `packing` (the case runs only where the row exists).
void pin(Weight& w, Packing packing) {
  w.plan = make_linear_plan(w.tensor.w, packing);
  KCHECK(w.plan != nullptr, "no {} kernel at {}", packing_name(packing), linear_isa());
  w.tensor.plan = w.plan.get();
}

std::unique_ptr<Weight> make_weight(const WeightType& type, const MatShape& shape) {
  auto w = std::make_unique<Weight>();
  w->data = HostBuffer(type.dtype, {shape.n, shape.k});
  w->tensor = LinearWeight{w->data.view()};
  std::vector<float> row(shape.k);
  std::minstd_rand rng(uint32_t(shape.n * 7919 + shape.k));
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  auto* dst = static_cast<uint8_t*>(w->data.data());
  if (type.dtype == DType::F8_E4M3) {
    fill_fp8(*w, shape, rng);
    if (type.packed) pin(*w, Packing::kFp8Panels);  // same bytes per call as the rows
    return w;
  }
  if (type.dtype == DType::I8) {
    fill_int8(*w, shape, type.int4, rng);
    if (type.packed) {
      pin(*w, type.int4 ? Packing::kInt4Panels : Packing::kInt8Panels);
      // What a call reads: the packed panels (and the row scales).
      w->bytes_per_call =
          (type.int4 ? int4_packed_panel_bytes(shape.k) : int8_packed_panel_bytes(shape.k)) *
              size_t((shape.n + kPanelRows - 1) / kPanelRows) +
          w->block_scale.size() * sizeof(float);
    }
    return w;
  }
  for (int64_t r = 0; r < shape.n; ++r) {
    for (float& v : row) v = ud(rng);
    quantize_row(type.dtype, row.data(), dst + size_t(r) * w->tensor.w.row_bytes(), shape.k);
  }
  w->bytes_per_call = w->tensor.nbytes();
  if (type.bf16_tiles) {
    pin(*w, Packing::kBf16Tiles);
  } else if (type.packed && float_packable(w->tensor.w)) {
    pin(*w, Packing::kFloatPanels);
  } else if (type.packed && kquant_packable(w->tensor.w)) {
    pin(*w, Packing::kKQuantPanels);
    w->bytes_per_call =
        size_t(shape.k / QK_K) * kquant_block_bytes(type.dtype) * size_t(packed_panels(shape.n));
  } else if (type.packed) {
    pin(*w, Packing::kQ8Panels);
    w->bytes_per_call = packed_panel_bytes(type.dtype, shape.k) * size_t(packed_panels(shape.n));
  }
  return w;
}

// Cases are registered type by type and shape by shape, so keeping only the most recent weight
// builds each one once while holding a single weight in memory (the LM head is 56 MB in f16).
const Weight& cached_weight(const WeightType& type, const MatShape& shape) {
  static std::string key;
  static std::unique_ptr<Weight> weight;
  const std::string want =
      std::string(type.label) + "/" + std::to_string(shape.n) + "x" + std::to_string(shape.k);
  if (want != key) {
    weight.reset();
    weight = make_weight(type, shape);
    key = want;
  }
  return *weight;
}

void bm_linear(benchmark::State& state, WeightType type, MatShape shape) {
  const int64_t m = state.range(0);
  const Weight& w = cached_weight(type, shape);
  ThreadPool pool(int(state.range(1)));
  ThreadScratch scratch(pool.size());  // the backend's, kept across calls
  std::vector<float> x(size_t(m * shape.k)), y(size_t(m * shape.n));
  std::minstd_rand rng{uint32_t(m)};
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (float& v : x) v = ud(rng);
  set_packed_amx(type.amx);
  for (auto _ : state) {
    linear(w.tensor, x.data(), m, y.data(), pool, QuantCompute::kInt8, &scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_packed_amx(true);
  state.SetItemsProcessed(state.iterations() * m);
  state.counters["GB/s"] = benchmark::Counter(double(w.bytes_per_call) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter(double(m * shape.n * shape.k) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const bool packed_ok = packed_weights_supported();
  // I8 panels have an AVX2 GEMM too.
  const bool int8_packed_ok = selected_int8_gemm() != nullptr;
  const WeightType types[] = {
      {"f16", DType::F16, false},
      {"bf16", DType::BF16, false},
      {"f16_packed", DType::F16, true},
      {"bf16_packed", DType::BF16, true},
      {"bf16_amx", DType::BF16, true, true, true},
      {"q4_0", DType::Q4_0, false},
      {"q4_0_packed", DType::Q4_0, true},
      {"q4_1", DType::Q4_1, false},
      {"q4_1_packed", DType::Q4_1, true},
      {"q5_0", DType::Q5_0, false},
      {"q5_0_packed", DType::Q5_0, true},
      {"q8_0", DType::Q8_0, false},
      {"q8_0_packed", DType::Q8_0, true},
      {"q4_1_vnni", DType::Q4_1, true, false},
      {"q8_0_vnni", DType::Q8_0, true, false},
      {"mxfp4", DType::MXFP4, false},
      {"q4_k", DType::Q4_K, false},
      {"q4_k_packed", DType::Q4_K, true},
      {"q6_k", DType::Q6_K, false},
      {"q6_k_packed", DType::Q6_K, true},
      {"fp8", DType::F8_E4M3, false},
      {"fp8_packed", DType::F8_E4M3, true},
      {"w8a8", DType::I8, false},
      {"w8a8_packed", DType::I8, true},
      {"w8a8_vnni", DType::I8, true, false},
      {"w4a8_packed", DType::I8, true, true, false, true},
      {"w4a8_vnni", DType::I8, true, false, false, true},
  };
  const MatShape shapes[] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}, {4096, 4096}};
  for (const WeightType& type : types) {
    const bool fp8_packed_ok = std::string(linear_isa()) != "scalar";  // AVX2 and AVX-512
    if (type.packed && !(type.dtype == DType::I8        ? int8_packed_ok
                         : type.dtype == DType::F8_E4M3 ? fp8_packed_ok
                                                        : packed_ok))
      continue;
    if (type.bf16_tiles && !bf16_tiles_supported()) continue;
    for (const MatShape& shape : shapes) {
      // K-quant super-blocks are 256 wide, so they cannot hold SmolLM2's 576-wide rows (GGUF
      // files store those tensors in another type).
      if (shape.k % dtype_info(type.dtype).block_elems != 0) continue;
      const std::string name = std::string("linear/") + type.label + "/" + std::to_string(shape.n) +
                               "x" + std::to_string(shape.k);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), bm_linear, type, shape);
      b->ArgNames({"M", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t m : {1, 16, 64, 512})
        for (int64_t threads : {1, 2}) b->Args({m, threads});
    }
  }
}

}  // namespace
}  // namespace kestrel::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The cap the engine takes from the same variable (KESTREL_CPU_ISA=avx2: the AVX2 kernels).
  if (const char* isa = std::getenv("KESTREL_CPU_ISA"); isa != nullptr && *isa != '\0') {
    if (kestrel::Status st = kestrel::cap_cpu_isa(isa); !st.ok()) {
      std::fprintf(stderr, "KESTREL_CPU_ISA: %s\n", st.message().c_str());
      return 1;
    }
  }
  kestrel::cpu::register_all();
  benchmark::AddCustomContext("linear_isa", kestrel::cpu::linear_isa());
  benchmark::AddCustomContext("packed_amx", kestrel::cpu::packed_amx_active() ? "yes" : "no");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
