// The per-core compute peaks the GEMM kernels are measured against (issue 18): multiply-accumulate
// loops with enough independent accumulators to hide latency, one thread, no memory traffic.
//
// Run:   ./build-bench/bench/kernels/peak_bench --benchmark_min_time=0.2
// Cases: peak/f32_fma (vfmadd231ps zmm, 16 MACs per instruction), peak/bf16_dpbf16 (vdpbf16ps zmm,
// 32), peak/int8_vnni (vpdpbusd zmm, 64), and where the CPU and kernel allow AMX:
// peak/int8_amx (tdpbssd, 16·16·64 MACs per instruction), peak/bf16_amx (tdpbf16ps, 16·16·32).
// AVX2 (what a CPU without AVX-512 has): peak/f32_fma_avx2 (vfmadd231ps ymm, 8), and the pairs the
// AVX2 int8 GEMM runs (int8_packed_avx2.cc): peak/int16_madd_avx2 (vpmaddwd + vpaddd ymm, 16 MACs
// per pair) and peak/int8_maddubs_avx2 (vpmaddubsw + vpaddw ymm, 32; the int4 panels').
// Column GMAC/s is the peak; a case the CPU lacks is skipped with a message.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/amx_tiles.h"

namespace {

constexpr int kIters = 1 << 14;

// Twelve independent accumulators per kind: more than latency × throughput on current cores.
void run_peak(benchmark::State& state, double macs_per_step, void (*step)()) {
  for (auto _ : state) step();
  state.counters["GMAC/s"] = benchmark::Counter(macs_per_step * kIters * 12 * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

__attribute__((target("avx512f"))) void f32_steps() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.9999f);
  for (int it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(x, y, a[i]);
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_f32(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512f")) return state.SkipWithError("no AVX-512F");
  run_peak(state, 16, f32_steps);
}

__attribute__((target("avx512f,avx512bf16"))) void bf16_steps() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f81);
  for (int it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_bf16(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16");
  run_peak(state, 32, bf16_steps);
}

__attribute__((target("avx512f,avx512vnni"))) void vnni_steps() {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  for (int it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_vnni(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512vnni")) return state.SkipWithError("no AVX-512 VNNI");
  run_peak(state, 64, vnni_steps);
}

__attribute__((target("avx2,fma"))) void f32_avx2_steps() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(1.0001f), y = _mm256_set1_ps(0.9999f);
  for (int it = 0; it < kIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(x, y, a[i]);
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_f32_avx2(benchmark::State& state) {
  if (!__builtin_cpu_supports("fma")) return state.SkipWithError("no FMA");
  run_peak(state, 8, f32_avx2_steps);
}

// The products are independent of the accumulators, as in the kernels: only the adds chain.
__attribute__((target("avx2"))) void madd_avx2_steps() {
  __m256i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi32(i);
  __m256i x = _mm256_set1_epi16(3);
  const __m256i y = _mm256_set1_epi16(-2);
  for (int it = 0; it < kIters; ++it) {
    // Keeps the compiler from hoisting the products out of the loop.
    __asm__("" : "+x"(x));
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(x, y));
  }
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_madd_avx2(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) return state.SkipWithError("no AVX2");
  run_peak(state, 16, madd_avx2_steps);
}

__attribute__((target("avx2"))) void maddubs_avx2_steps() {
  __m256i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi16(int16_t(i));
  __m256i x = _mm256_set1_epi8(3);
  const __m256i y = _mm256_set1_epi8(-2);
  for (int it = 0; it < kIters; ++it) {
    __asm__("" : "+x"(x));
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_add_epi16(a[i], _mm256_maddubs_epi16(x, y));
  }
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
}

void bm_maddubs_avx2(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) return state.SkipWithError("no AVX2");
  run_peak(state, 32, maddubs_avx2_steps);
}

// Tiles 0–3 accumulate (16 rows × 64 bytes), 4–5 and 6–7 are the operands; four independent
// accumulations per round stand for the twelve of the vector loops (AMX has eight tiles).
const kestrel::cpu::AmxTileConfig kTiles = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile,amx-int8,amx-bf16"))) void load_tiles() {
  _tile_loadconfig(&kTiles);
  alignas(64) static uint8_t buf[16 * 64];
  std::memset(buf, 1, sizeof(buf));
  _tile_loadd(4, buf, 64);
  _tile_loadd(5, buf, 64);
  _tile_loadd(6, buf, 64);
  _tile_loadd(7, buf, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Three rounds of four per iteration: twelve instructions, as the vector loops count them.
__attribute__((target("amx-tile,amx-int8"))) void amx_int8_steps() {
  for (int it = 0; it < kIters; ++it) {
    for (int r = 0; r < 3; ++r) {
      _tile_dpbssd(0, 4, 5);
      _tile_dpbssd(1, 4, 6);
      _tile_dpbssd(2, 7, 5);
      _tile_dpbssd(3, 7, 6);
    }
  }
}

__attribute__((target("amx-tile"))) void release_tiles() {
  _tile_release();
}

void bm_amx_int8(benchmark::State& state) {
  if (!kestrel::cpu::amx_tile_state_granted())
    return state.SkipWithError("no AMX (CPU or kernel permission)");
  load_tiles();
  run_peak(state, 16.0 * 16 * 64, amx_int8_steps);
  release_tiles();
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_bf16_steps() {
  for (int it = 0; it < kIters; ++it) {
    for (int r = 0; r < 3; ++r) {
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(1, 4, 6);
      _tile_dpbf16ps(2, 7, 5);
      _tile_dpbf16ps(3, 7, 6);
    }
  }
}

void bm_amx_bf16(benchmark::State& state) {
  if (!kestrel::cpu::amx_tile_state_granted())
    return state.SkipWithError("no AMX (CPU or kernel permission)");
  load_tiles();
  run_peak(state, 16.0 * 16 * 32, amx_bf16_steps);
  release_tiles();
}

}  // namespace

BENCHMARK(bm_f32)->Name("peak/f32_fma")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_bf16)->Name("peak/bf16_dpbf16")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_vnni)->Name("peak/int8_vnni")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_amx_int8)->Name("peak/int8_amx")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_f32_avx2)->Name("peak/f32_fma_avx2")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_madd_avx2)->Name("peak/int16_madd_avx2")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_maddubs_avx2)
    ->Name("peak/int8_maddubs_avx2")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_amx_bf16)->Name("peak/bf16_amx")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
