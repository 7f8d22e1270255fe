// The AVX2 FP8 kernel of fp8_matmul.h: eight weight rows at a time as the eight f32 lanes, so
// every output is one lane of the block chains and of the scaled sum, as in the scalar kernel.
// Codes become f16 bit patterns of value · 2⁻⁸ (fp8_e4m3_to_f16_scaled: a sign-extending widen,
// a shift and a mask), then f32 through vcvtph2ps; an 8×8 block is transposed in registers.
#include "backend/cpu/fp8_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/matmul_x86_common.h"
#include "backend/cpu/packed_matmul.h"
#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// Codes sign-extended to int16 lanes -> f16 bits: the shift puts e and m into f16's fields and
// the sign into bit 15; the mask clears the copy of the sign the shift left in bit 14.
__m128i f16_bits(__m128i s16) {
  return _mm_and_si128(_mm_slli_epi16(s16, 7), _mm_set1_epi16(int16_t(0xBF80)));
}

// Eight codes.
__m256 widen8(const uint8_t* q) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  return _mm256_cvtph_ps(f16_bits(_mm_cvtepi8_epi16(c)));
}

// The eight lanes' scales of column block b, times 2⁸ (exact).
__m256 block_scales(const float* const* scale, int64_t b) {
  return _mm256_mul_ps(_mm256_setr_ps(scale[0][b], scale[1][b], scale[2][b], scale[3][b],
                                      scale[4][b], scale[5][b], scale[6][b], scale[7][b]),
                       _mm256_set1_ps(kFp8F16Scale));
}

// Rows j0 .. j0 + valid − 1 of w as the eight lanes (the missing lanes repeat the last row and
// are not stored) against NX activation rows.
template <int NX>
void eight_rows(const Fp8Weight& w, int64_t j0, int valid, const float* const* xr, float* out,
                int64_t os) {
  const uint8_t* q[8];
  const float* scale[8];
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) {
    const int64_t j = j0 + (l < valid ? l : valid - 1);
    q[l] = w.row_codes(j);
    scale[l] = w.row_scales(j);
  }
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t c0 = 0, b = 0; c0 < w.k; c0 += w.block_cols, ++b) {
    const int64_t c1 = std::min(w.k, c0 + w.block_cols);
    __m256 s[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) s[r] = _mm256_setzero_ps();
    int64_t i = c0;
    for (; i + 8 <= c1; i += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) v[l] = widen8(q[l] + i);
      transpose8(v);
#pragma GCC unroll 8
      for (int e = 0; e < 8; ++e)
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r)
          s[r] = _mm256_fmadd_ps(v[e], _mm256_broadcast_ss(xr[r] + i + e), s[r]);
    }
    for (; i < c1; ++i) {
      alignas(16) uint16_t h[8];
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) h[l] = fp8_e4m3_to_f16_scaled(q[l][i]);
      const __m256 v = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) s[r] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(xr[r] + i), s[r]);
    }
    const __m256 sb = block_scales(scale, b);
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_fmadd_ps(s[r], sb, acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) store_lanes(out + r * os, acc[r], valid);
}

void fp8_rows(const Fp8Weight& w, int64_t j0, int64_t nw, const void* x, size_t xs, int nx,
              float* out, int64_t os) {
  const float* xr[kMaxTileRows];
  nx = std::clamp(nx, 1, kMaxTileRows);
  for (int r = 0; r < nx; ++r)
    xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
  using Rows = void (*)(const Fp8Weight&, int64_t, int, const float* const*, float*, int64_t);
  static constexpr Rows kRows[kMaxTileRows] = {eight_rows<1>, eight_rows<2>, eight_rows<3>,
                                               eight_rows<4>};
  for (int64_t j = 0; j < nw; j += 8)
    kRows[nx - 1](w, j0 + j, int(std::min<int64_t>(8, nw - j)), xr, out + j, os);
}

constexpr Fp8Kernels kAvx2Fp8Kernels = {fp8_rows, kMaxTileRows};

// Eight rows of a panel as the lanes: their codes (lane l's at codes[i · kPanelRows + l]), their
// scales, how many are real.
struct Lanes {
  const uint8_t* codes;
  const float* scale[8];
  int valid;
};

// L groups of eight panel rows against NX activation rows: the same steps as eight_rows, each k's
// eight weights one load. Every output is its own fma chain, so L · NX chains run side by side to
// cover the fma latency (fp8_panels picks L).
template <int L, int NX>
void panel_lanes(const Fp8Weight& w, const Lanes* lanes, const float* const* xr, float* const* out,
                 int64_t os) {
  __m256 acc[L][NX];
#pragma GCC unroll 4
  for (int g = 0; g < L; ++g)
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) acc[g][r] = _mm256_setzero_ps();
  for (int64_t c0 = 0, b = 0; c0 < w.k; c0 += w.block_cols, ++b) {
    const int64_t c1 = std::min(w.k, c0 + w.block_cols);
    __m256 s[L][NX];
#pragma GCC unroll 4
    for (int g = 0; g < L; ++g)
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) s[g][r] = _mm256_setzero_ps();
    for (int64_t i = c0; i < c1; ++i) {
      __m256 x[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) x[r] = _mm256_broadcast_ss(xr[r] + i);
#pragma GCC unroll 4
      for (int g = 0; g < L; ++g) {
        const __m256 v = widen8(lanes[g].codes + i * kPanelRows);
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) s[g][r] = _mm256_fmadd_ps(v, x[r], s[g][r]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < L; ++g) {
      const __m256 sb = block_scales(lanes[g].scale, b);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) acc[g][r] = _mm256_fmadd_ps(s[g][r], sb, acc[g][r]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < L; ++g)
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) store_lanes(out[g] + r * os, acc[g][r], lanes[g].valid);
}

void fp8_panels(const Fp8Weight& w, const uint8_t* panels, int64_t n, const void* x, size_t xs,
                int64_t m, float* y, int64_t ldy, int64_t p0, int64_t p1) {
  // Eight chains per step: eight lane groups for one activation row, four for two, two for
  // three or four.
  using Fn = void (*)(const Fp8Weight&, const Lanes*, const float* const*, float* const*, int64_t);
  static constexpr Fn kByNx[kMaxTileRows] = {panel_lanes<8, 1>, panel_lanes<4, 2>,
                                             panel_lanes<2, 3>, panel_lanes<2, 4>};
  static constexpr int kGroups[kMaxTileRows] = {8, 4, 2, 2};
  const size_t panel_bytes = size_t(w.k) * kPanelRows;
  // Lane group g: rows j0 = p0 · kPanelRows + 8g onwards, half g % 2 of panel p0 + g / 2.
  const int64_t first = p0 * kPanelRows;
  const int64_t n_groups = (std::min(n, p1 * kPanelRows) - first + 7) / 8;
  auto lanes = [&](int64_t g) {
    const int64_t j0 = first + 8 * g;
    Lanes l{panels + size_t(p0 + g / 2) * panel_bytes + size_t(g % 2) * 8,
            {},
            int(std::min<int64_t>(8, n - j0))};
    for (int i = 0; i < 8; ++i) l.scale[i] = w.row_scales(j0 + std::min(i, l.valid - 1));
    return l;
  };
  for (int64_t r0 = 0; r0 < m; r0 += kMaxTileRows) {
    const int nx = int(std::min<int64_t>(kMaxTileRows, m - r0));
    const float* xr[kMaxTileRows];
    for (int r = 0; r < nx; ++r)
      xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r0 + r) * xs);
    const int want = kGroups[nx - 1];
    for (int64_t g0 = 0; g0 < n_groups; g0 += want) {
      // Past the last group the batch repeats it (computed and stored again: the same values).
      Lanes batch[8];
      float* out[8];
      for (int g = 0; g < want; ++g) {
        const int64_t at = std::min(g0 + g, n_groups - 1);
        batch[g] = lanes(at);
        out[g] = y + r0 * ldy + first + 8 * at;
      }
      kByNx[nx - 1](w, batch, xr, out, ldy);
    }
  }
}

}  // namespace

const Fp8Kernels* avx2_fp8_kernels() {
  return &kAvx2Fp8Kernels;
}

Fp8PanelsFn avx2_fp8_panels() {
  return fp8_panels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Fp8Kernels* avx2_fp8_kernels() {
  return nullptr;
}
Fp8PanelsFn avx2_fp8_panels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
