// Why the AMX-BF16 tiles stay opt-in (cpu_isa.h, KESTREL_CPU_AMX_BF16): one TDPBF16PS
// (16 × 16 outputs, 32 bf16 products each, onto a random f32 accumulator) against f32 emulations
// of its rounding that the other ISAs could follow. If one matched bit for bit, every ISA could
// compute bf16 GEMMs that way and the tiles would join the one-arithmetic guarantee. Prints, per
// emulation, how many of the outputs differ.
//   ./build-bench/bench/kernels/amx_bf16_probe [TRIALS]
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cpu/amx_tiles.h"

namespace {

float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// Tiles 0: the f32 results (16 × 16), 1: A (16 rows × 32 bf16), 2: B (16 pair rows × 16 × 2).
const kestrel::cpu::AmxTileConfig kProbeTiles = {1, 0, {}, {64, 64, 64}, {16, 16, 16}};

__attribute__((target("amx-tile,amx-bf16"))) void tile_product(const uint16_t* a, const uint16_t* b,
                                                               float* c) {
  _tile_loadconfig(&kProbeTiles);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, a, 64);
  _tile_loadd(2, b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c, 64);
  _tile_release();
}

constexpr int kVariants = 6;
const char* const kNames[kVariants] = {
    "fma chain, pair elements in order",
    "fma chain, odd element first",
    "each pair summed in f32, then added",
    "the 32 products summed in an fma chain from zero, then added",
    "the 32 products summed in a pairwise tree, then added",
    "accumulator + all products in double, one rounding",
};

// Output (m, n) of C0 + A·B, emulated each way.
void emulate(const uint16_t (&a)[16][32], const uint16_t (&b)[16][32], float c0, int m, int n,
             float (&out)[kVariants]) {
  float p[32];
  for (int k = 0; k < 16; ++k) {
    p[2 * k] = bf16_value(a[m][2 * k]) * bf16_value(b[k][2 * n]);  // exact in f32
    p[2 * k + 1] = bf16_value(a[m][2 * k + 1]) * bf16_value(b[k][2 * n + 1]);
  }
  float e0 = c0, e1 = c0, e2 = c0, chain = 0.0f;
  double all = c0;
  for (int k = 0; k < 16; ++k) {
    e0 = std::fma(bf16_value(a[m][2 * k + 1]), bf16_value(b[k][2 * n + 1]),
                  std::fma(bf16_value(a[m][2 * k]), bf16_value(b[k][2 * n]), e0));
    e1 = std::fma(bf16_value(a[m][2 * k]), bf16_value(b[k][2 * n]),
                  std::fma(bf16_value(a[m][2 * k + 1]), bf16_value(b[k][2 * n + 1]), e1));
    e2 = e2 + (p[2 * k] + p[2 * k + 1]);
    chain = std::fma(bf16_value(a[m][2 * k]), bf16_value(b[k][2 * n]), chain);
    chain = std::fma(bf16_value(a[m][2 * k + 1]), bf16_value(b[k][2 * n + 1]), chain);
    all += double(p[2 * k]) + double(p[2 * k + 1]);
  }
  for (int w = 16; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) p[i] = p[2 * i] + p[2 * i + 1];
  out[0] = e0;
  out[1] = e1;
  out[2] = e2;
  out[3] = c0 + chain;
  out[4] = c0 + p[0];
  out[5] = float(all);
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("amx-bf16") || !kestrel::cpu::amx_tile_state_granted()) {
    std::fprintf(stderr, "no AMX-BF16 on this CPU or kernel\n");
    return 1;
  }
  const int trials = argc > 1 ? std::atoi(argv[1]) : 200;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  long differ[kVariants] = {}, total = 0;
  for (int t = 0; t < trials; ++t) {
    alignas(64) uint16_t a[16][32], b[16][32];
    alignas(64) float c[16][16], c0[16][16];
    // Scales spread over orders of magnitude, so products and accumulators often differ in size.
    const float sa = std::exp(3 * normal(rng)), sb = std::exp(3 * normal(rng));
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 32; ++j) {
        a[i][j] = to_bf16(normal(rng) * sa);
        b[i][j] = to_bf16(normal(rng) * sb);
      }
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) c[i][j] = c0[i][j] = 3 * normal(rng) * sa * sb;
    tile_product(&a[0][0], &b[0][0], &c[0][0]);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float e[kVariants];
        emulate(a, b, c0[m][n], m, n, e);
        for (int v = 0; v < kVariants; ++v) differ[v] += std::memcmp(&e[v], &c[m][n], 4) != 0;
        ++total;
      }
  }
  std::printf("%ld outputs of TDPBF16PS\n", total);
  for (int v = 0; v < kVariants; ++v)
    std::printf("%-62s %6ld differ (%.1f %%)\n", kNames[v], differ[v], 100.0 * differ[v] / total);
  return 0;
}
