// AVX2 float GEMM over float panels (float_panels.h): each sixteen-row panel as two 8-lane
// halves; per k, the halves' weights (converted once) meet R broadcast activations in one FMA
// per output, K in chunks that keep a panel's share in L1. Every output is the sequential chain
// float_panels.h states — the AVX-512 kernel's bits.
#include "backend/cpu/float_panels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace kestrel::cpu {
namespace {

constexpr int kHalves = 2;

template <DType T>
__m256 load8(const uint8_t* p) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
}

constexpr size_t elem_bytes(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// Elements of K per chunk: a panel's chunk (8 KiB of bf16) and the tile's activations stay in L1.
constexpr int64_t kChunk = 256;

// Lanes [0, n) of the eight, for masked loads of a partial half.
__m256i lanes_below(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Rows row .. row+R-1 against panels panel .. panel+P-1 over K chunk [k0, k1). Between chunks the
// accumulators go through y, which is exact, so each output stays one fma chain along K.
template <DType T, int R, int P>
void tile(const FloatGemm& g, int64_t panel, int64_t row, int64_t k0, int64_t k1) {
  constexpr size_t kStep = kPanelRows * elem_bytes(T);  // bytes per k in a panel
  const size_t panel_bytes = float_panel_bytes(T, g.k);
  const uint8_t* wp[P];
  __m256i mask[P][kHalves];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    wp[p] = g.w + size_t(panel + p) * panel_bytes + size_t(k0) * kStep;
    const int valid = int(std::min<int64_t>(kPanelRows, g.n - (panel + p) * kPanelRows));
#pragma GCC unroll 8
    for (int h = 0; h < kHalves; ++h) mask[p][h] = lanes_below(valid - 8 * h);
  }
  const float* xr[R];
  __m256 acc[R][P][kHalves];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xr[r] = g.x + (row + r) * g.k;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int h = 0; h < kHalves; ++h) {
        const float* y = g.y + (row + r) * g.y_stride + (panel + p) * kPanelRows + 8 * h;
        acc[r][p][h] = k0 == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(y, mask[p][h]);
      }
  }
  for (int64_t k = k0; k < k1; ++k) {
    __m256 w[P][kHalves];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int h = 0; h < kHalves; ++h)
        w[p][h] = load8<T>(wp[p] + size_t(k - k0) * kStep + h * 8 * elem_bytes(T));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(xr[r] + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
        for (int h = 0; h < kHalves; ++h) acc[r][p][h] = _mm256_fmadd_ps(x, w[p][h], acc[r][p][h]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int h = 0; h < kHalves; ++h)
        _mm256_maskstore_ps(g.y + (row + r) * g.y_stride + (panel + p) * kPanelRows + 8 * h,
                            mask[p][h], acc[r][p][h]);
}

// Panels [p0, p1) over one K chunk for rows row .. row+R-1: six rows × one panel fill twelve
// accumulators; one row takes four panels and two rows two, so that decode has eight
// independent FMA chains.
template <DType T, int R>
void rows(const FloatGemm& g, int64_t p0, int64_t p1, int64_t row, int64_t k0, int64_t k1) {
  constexpr int P = R == 1 ? 4 : R == 2 ? 2 : 1;
  int64_t p = p0;
  for (; p + P <= p1; p += P) tile<T, R, P>(g, p, row, k0, k1);
  for (; p < p1; ++p) tile<T, R, 1>(g, p, row, k0, k1);
}

// Panels are taken in chunks of about this many bytes, which stay in L2 while every row tile
// passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <DType T>
void gemm(const FloatGemm& g, int64_t p0, int64_t p1) {
  const int64_t chunk = std::max<int64_t>(2, int64_t(kPanelChunkBytes / float_panel_bytes(T, g.k)));
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    for (int64_t k0 = 0; k0 < g.k; k0 += kChunk) {
      const int64_t k1 = std::min(g.k, k0 + kChunk);
      int64_t row = 0;
      for (; row + 6 <= g.m; row += 6) rows<T, 6>(g, c0, c1, row, k0, k1);
      switch (g.m - row) {
        case 5:
          rows<T, 5>(g, c0, c1, row, k0, k1);
          break;
        case 4:
          rows<T, 4>(g, c0, c1, row, k0, k1);
          break;
        case 3:
          rows<T, 3>(g, c0, c1, row, k0, k1);
          break;
        case 2:
          rows<T, 2>(g, c0, c1, row, k0, k1);
          break;
        case 1:
          rows<T, 1>(g, c0, c1, row, k0, k1);
          break;
        default:
          break;
      }
    }
  }
}

constexpr FloatGemmFn kGemm =
    float_gemm_for_type<gemm<DType::F32>, gemm<DType::F16>, gemm<DType::BF16>>;

}  // namespace

FloatGemmFn avx2_float_gemm() {
  return kGemm;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
FloatGemmFn avx2_float_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
