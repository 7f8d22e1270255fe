// backend/cpu/packed_gemm_avx2.h — the 8-lane GEMM over packed weights (layout in
// packed_matmul.h) that the AVX2 and the AVX-VNNI kernels share: each 64-byte quad row taken as
// two 32-byte halves, rows 0–7 and 8–15 of the panel, as eight lanes. Four activation codes
// broadcast to every lane meet a half in maddubs + madd — no int16 saturation: Q4 and Q5 codes are
// below 16 and 32, and Q8_0's go through the sign trick — or, with kVnni, in one VEX vpdpbusd
// (unsigned codes, Q8_0's offset taken off per block). Either way the integer block sums are
// exact and each lane then takes the arithmetic's per-block step: the same bits as the AVX-512
// kernels and the row kernels of q8_block_dot.h.
//
// Include only from the two kernel files; everything here is in an unnamed namespace, so each
// keeps its own copy, compiled with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/packed_matmul.h"

namespace kestrel::cpu {
namespace {

constexpr int kHalves = 2;  // 8-lane halves of a 16-row panel
// How far ahead decode prefetches, in blocks: of 2, 4, 8 and 16, 8 decoded Q4_0 fastest.
constexpr int kPrefetchBlocks = 8;

template <DType T>
struct Format {
  static constexpr bool kNibbles = T != DType::Q8_0;
  static constexpr bool kFifthBit = T == DType::Q5_0 || T == DType::Q5_1;
  static constexpr bool kMin = packed_has_min(T);
  // log2 of the offset of Q4_0's and Q5_0's unsigned codes (u = code + 8, code + 16); Q8_0's
  // codes go through the sign trick instead.
  static constexpr int kOffsetShift = T == DType::Q4_0 ? 3 : T == DType::Q5_0 ? 4 : 0;
  static constexpr int kCodeBytes = int(packed_block_code_bytes(T));
  static constexpr int kBlockBytes = int(packed_block_bytes(T));
  // Quad-row steps summed in int16 before one madd widens them: eight maddubs pairs of codes
  // below 16 reach at most 8 · 2 · 15 · 127 = 30480, but below 32 only four stay in range
  // (4 · 2 · 31 · 127 = 31496).
  static constexpr int kInt16Steps = kFifthBit ? 2 : 4;
};

__m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

__m256 half_scales(const uint8_t* block, int code_bytes, int which, int half) {
  return _mm256_cvtph_ps(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(block + code_bytes + which * kPanelRows * 2 + half * 16)));
}

void store_half(float* y, __m256 v, int valid) {
  if (valid >= 8) {
    _mm256_storeu_ps(y, v);
  } else if (valid > 0) {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    std::memcpy(y, t, size_t(valid) * sizeof(float));
  }
}

template <bool kVnni, DType T, int R, int P, int NH>
void tile(const PackedGemm& g, int64_t panel, int64_t row, int h0) {
  using F = Format<T>;
  const int64_t nb = g.k / 32;
  const size_t panel_bytes = size_t(nb) * F::kBlockBytes;
  const __m256i low4 = _mm256_set1_epi8(0xF);
  const uint8_t* wp[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) wp[p] = g.w + size_t(panel + p) * panel_bytes;
  const int8_t* xr[R];
  __m256 acc[R][P][NH];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xr[r] = g.x.codes + size_t(row + r) * g.x.stride;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) acc[r][p][h] = _mm256_setzero_ps();
  }
  // R <= 4 rows starting at a multiple of R lie in one tile of the scale area.
  const int64_t scale_tile = row / kPanelRows;
  const int lane = int(row % kPanelRows);
  for (int64_t b = 0; b < nb; ++b) {
    // One row (decode) streams each panel once from memory, and the hardware prefetcher alone
    // left a third of the bandwidth unused (docs/benchmarks.md): ask for the block
    // kPrefetchBlocks ahead (past the panel's end: the next panel, the next tile's).
    if constexpr (R == 1)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        for (int off = 0; off < F::kBlockBytes; off += 64)
          _mm_prefetch(
              reinterpret_cast<const char*>(wp[p] + kPrefetchBlocks * F::kBlockBytes + off),
              _MM_HINT_T0);
    __m256i c[R][P][NH];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) c[r][p][h] = _mm256_setzero_si256();
    if constexpr (F::kNibbles) {
      // The maddubs pairs of kInt16Steps chunks are summed in int16 first (Format), then one
      // madd per half widens them.
      __m256i c16[R][P][NH], fifth_lo[P][NH], fifth_hi[P][NH];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) c16[r][p][h] = _mm256_setzero_si256();
      if constexpr (F::kFifthBit)
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) {
            // Bit t of each plane byte sits at bit 4 of fifth_lo, bit t + 4 at bit 4 of
            // fifth_hi, after t right shifts (16-bit shifts: no bit of a byte's neighbour
            // reaches bit 4).
            fifth_hi[p][h] = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(wp[p] + kPanelBlockCodes / 2 + 32 * (h0 + h)));
            fifth_lo[p][h] = _mm256_slli_epi16(fifth_hi[p][h], 4);
          }
      const auto chunk = [&](int t) __attribute__((always_inline)) {
        __m256i a0[R], a1[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          a0[r] = broadcast4(xr[r] + 4 * t);
          a1[r] = broadcast4(xr[r] + 4 * (t + 4));
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) {
            const __m256i v = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(wp[p] + 64 * t + 32 * (h0 + h)));
            __m256i lo = _mm256_and_si256(v, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if constexpr (F::kFifthBit) {
              const __m256i bit4 = _mm256_set1_epi8(0x10);
              lo = _mm256_or_si256(lo, _mm256_and_si256(fifth_lo[p][h], bit4));
              hi = _mm256_or_si256(hi, _mm256_and_si256(fifth_hi[p][h], bit4));
              fifth_lo[p][h] = _mm256_srli_epi16(fifth_lo[p][h], 1);
              fifth_hi[p][h] = _mm256_srli_epi16(fifth_hi[p][h], 1);
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
              if constexpr (kVnni) {
                c[r][p][h] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(c[r][p][h], lo, a0[r]),
                                                     hi, a1[r]);
              } else {
                c16[r][p][h] = _mm256_add_epi16(c16[r][p][h],
                                                _mm256_add_epi16(_mm256_maddubs_epi16(lo, a0[r]),
                                                                 _mm256_maddubs_epi16(hi, a1[r])));
              }
            }
          }
        if (!kVnni && (t + 1) % F::kInt16Steps == 0)
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
            for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
              for (int h = 0; h < NH; ++h) {
                c[r][p][h] = _mm256_add_epi32(
                    c[r][p][h], _mm256_madd_epi16(c16[r][p][h], _mm256_set1_epi16(1)));
                c16[r][p][h] = _mm256_setzero_si256();
              }
      };
      // Unrolled only for one row: with more, GCC computes every chunk's products before summing
      // them and spills them to the stack.
      if constexpr (R == 1) {
        chunk(0);
        chunk(1);
        chunk(2);
        chunk(3);
      } else {
#pragma GCC unroll 1
        for (int t = 0; t < 4; ++t) chunk(t);
      }
    } else {
      const auto quad_row = [&](int q) __attribute__((always_inline)) {
        __m256i a[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) a[r] = broadcast4(xr[r] + 4 * q);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
          for (int h = 0; h < NH; ++h) {
            const __m256i u = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(wp[p] + 64 * q + 32 * (h0 + h)));
            if constexpr (kVnni) {
              // The unsigned codes u = code + 128 as they are; the offset comes off per block.
#pragma GCC unroll 8
              for (int r = 0; r < R; ++r) c[r][p][h] = _mm256_dpbusd_avx_epi32(c[r][p][h], u, a[r]);
            } else {
              // Flipping u's top bit gives the signed code w, and |w|·(a with w's sign) keeps
              // every int16 pair sum in range.
              const __m256i w = _mm256_xor_si256(u, _mm256_set1_epi8(char(0x80)));
              const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 8
              for (int r = 0; r < R; ++r)
                c[r][p][h] = _mm256_add_epi32(
                    c[r][p][h],
                    _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(a[r], w)),
                                      _mm256_set1_epi16(1)));
            }
          }
      };
      if constexpr (R == 1) {
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) quad_row(q);
      } else {
#pragma GCC unroll 1
        for (int q = 0; q < 8; ++q) quad_row(q);
      }
    }
    __m256 dw[P][NH], mw[P][NH];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        dw[p][h] = half_scales(wp[p], F::kCodeBytes, 0, h0 + h);
        mw[p][h] = F::kMin ? half_scales(wp[p], F::kCodeBytes, 1, h0 + h) : _mm256_setzero_ps();
      }
      wp[p] += F::kBlockBytes;
    }
    const float* ts = g.x.tile_scales(scale_tile, b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(ts[lane + r]), s = _mm256_set1_ps(ts[kPanelRows + lane + r]);
      int32_t qsum;
      std::memcpy(&qsum, ts + 2 * kPanelRows + lane + r, sizeof(qsum));
      constexpr int kShift = kVnni && T == DType::Q8_0 ? 7 : F::kOffsetShift;
      const __m256i offset = _mm256_set1_epi32(qsum << kShift);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
        for (int h = 0; h < NH; ++h) {
          const __m256i cs = kShift != 0 ? _mm256_sub_epi32(c[r][p][h], offset) : c[r][p][h];
          __m256 a =
              _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(cs), dx), dw[p][h], acc[r][p][h]);
          if constexpr (F::kMin) a = _mm256_fmadd_ps(mw[p][h], s, a);
          acc[r][p][h] = a;
        }
      xr[r] += 32;
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int valid = int(std::min<int64_t>(kPanelRows, g.n - (panel + p) * kPanelRows));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h)
        store_half(g.y + (row + r) * g.y_stride + (panel + p) * kPanelRows + 8 * (h0 + h),
                   acc[r][p][h], valid - 8 * (h0 + h));
  }
}

// Panels [p0, p1) for rows row .. row+R-1. One row (decode) takes two panels, both halves, per
// tile for more independent chains; several rows take one half of one panel per tile, so that
// the accumulators of four rows fit the sixteen registers while each unpacked weight vector
// feeds all four.
template <bool kVnni, DType T, int R>
void rows(const PackedGemm& g, int64_t p0, int64_t p1, int64_t row) {
  if constexpr (R == 1) {
    int64_t p = p0;
    for (; p + 2 <= p1; p += 2) tile<kVnni, T, 1, 2, kHalves>(g, p, row, 0);
    for (; p < p1; ++p) tile<kVnni, T, 1, 1, kHalves>(g, p, row, 0);
  } else {
    for (int64_t p = p0; p < p1; ++p)
      for (int h = 0; h < kHalves; ++h) tile<kVnni, T, R, 1, 1>(g, p, row, h);
  }
}

// Panels are taken in chunks of about this many bytes, which stay in L2 while every row pair
// passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <bool kVnni, DType T>
void gemm(const PackedGemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = packed_panel_bytes(T, g.k);
  const int64_t chunk = std::max<int64_t>(4, int64_t(kPanelChunkBytes / panel_bytes));
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    int64_t row = 0;
    for (; row + 4 <= g.m; row += 4) rows<kVnni, T, 4>(g, c0, c1, row);
    for (; row + 2 <= g.m; row += 2) rows<kVnni, T, 2>(g, c0, c1, row);
    if (row < g.m) rows<kVnni, T, 1>(g, c0, c1, row);
  }
}

template <bool kVnni>
constexpr PackedGemmFn kPackedGemm =
    gemm_for_type<gemm<kVnni, DType::Q4_0>, gemm<kVnni, DType::Q4_1>, gemm<kVnni, DType::Q5_0>,
                  gemm<kVnni, DType::Q5_1>, gemm<kVnni, DType::Q8_0>>;

}  // namespace
}  // namespace kestrel::cpu
