// AVX-512 VNNI GEMM over K-quant panels (layout in kquant_panels.h): each 64-byte quad-row
// vector is one weight operand, sixteen rows as sixteen int32 lanes. Per unit of 32 elements,
// four activation codes broadcast to every lane meet a chunk's low and high nibbles in two
// _mm512_dpbusd_epi32 (exact int32 sums, two accumulators for independent chains), and one
// vpmulld per accumulator applies the lanes' sub-block scales. Mins and Q6_K's offset come from
// vpdpwssd over int16 pairs. Batches of kKConvertRows or more read the codes converted to bytes
// (for_converted_chunks), one dpbusd per quad row. The integers are the AVX2 kernel's and the row
// kernels' exactly, and the two fmas per super-block the same, so every ISA gives the same bits.
#include "backend/cpu/kquant_panels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "tensor/quant_formats.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

template <DType T>
struct KFormat {
  static constexpr bool kMin = kquant_has_min(T);
  static constexpr bool kTwoScales = T == DType::Q6_K;  // a scale per half unit
  static constexpr int kUnitBytes = int(kquant_unit_bytes(T));
  static constexpr int kBlockBytes = int(kquant_block_bytes(T));
};

__attribute__((always_inline)) inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// Sixteen rows' byte values a and b (signed) as int16 pairs (a, b) in sixteen 32-bit lanes.
__attribute__((always_inline)) inline __m512i int16_pairs(const uint8_t* a, const uint8_t* b) {
  const __m512i lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m512i hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
                         _mm512_slli_epi32(hi, 16));
}

__attribute__((always_inline)) inline __m512i scales32(const uint8_t* s) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
}

// The end of super-block b for R activation rows and panel p of the tile: c the rows' integer
// sums, wp the panel's block; the mins (or Q6_K's offset) and the two fmas of kquant_dot.h.
template <DType T, int R, int P>
__attribute__((always_inline)) inline void epilogue(const uint8_t* wp, int p,
                                                    const __m512i (&c)[R][P],
                                                    const BlockQ8_K* const (&xr)[R], int64_t b,
                                                    __m512 (&acc)[R][P]) {
  using F = KFormat<T>;
  const uint8_t* dp = wp + kquant_d_offset(T);
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dp)));
  const __m512 dmin =
      F::kMin ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dp + 32)))
              : _mm512_setzero_ps();
  // The int16 pairs of the epilogue (kquant_panels_avx2.cc): Q6_K's scales, else the mins.
  constexpr int kPairs = F::kMin ? 4 : 8;
  const uint8_t* paired = wp + (F::kMin ? kquant_mins_offset(T) : kquant_scales_offset(T));
  __m512i pairs[kPairs];
#pragma GCC unroll 8
  for (int q = 0; q < kPairs; ++q)
    pairs[q] = int16_pairs(paired + 2 * q * kPanelRows, paired + (2 * q + 1) * kPanelRows);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const BlockQ8_K& y = xr[r][b];
    const __m512 yd = _mm512_set1_ps(y.d);
    int32_t ypair[kPairs];
    kquant_activation_pairs(y, F::kMin, ypair);
    __m512i paired_sum = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int q = 0; q < kPairs; ++q)
      paired_sum = _mm512_dpwssd_epi32(paired_sum, pairs[q], _mm512_set1_epi32(ypair[q]));
    if constexpr (F::kMin) {
      acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[r][p]), _mm512_mul_ps(dw, yd), acc[r][p]);
      acc[r][p] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), paired_sum)),
                          _mm512_mul_ps(dmin, yd), acc[r][p]);
    } else {
      const __m512i cs = _mm512_sub_epi32(c[r][p], _mm512_slli_epi32(paired_sum, 5));
      acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(cs), _mm512_mul_ps(dw, yd), acc[r][p]);
    }
  }
}

template <int R, int P>
void store_tile(const KQuantGemm& g, int64_t panel, int64_t row, const __m512 (&acc)[R][P]) {
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
    const int valid = int(std::min<int64_t>(kPanelRows, g.n - (panel + p) * kPanelRows));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float* y = g.y + (row + r) * g.y_stride + (panel + p) * kPanelRows;
      if (valid >= kPanelRows) {
        _mm512_storeu_ps(y, acc[r][p]);
      } else {
        _mm512_mask_storeu_ps(y, __mmask16((1u << valid) - 1), acc[r][p]);
      }
    }
  }
}

// R activation rows × P panels, unpacking the codes as it goes: decode and small batches.
template <DType T, int R, int P>
void tile(const KQuantGemm& g, int64_t panel, int64_t row) {
  using F = KFormat<T>;
  const int64_t nb = g.k / QK_K;
  const size_t panel_bytes = size_t(nb) * F::kBlockBytes;
  const BlockQ8_K* xr[R];
  __m512 acc[R][P];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xr[r] = reinterpret_cast<const BlockQ8_K*>(g.x + size_t(row + r) * g.x_stride);
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0xF);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wp[P];
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) wp[p] = g.w + size_t(panel + p) * panel_bytes + b * F::kBlockBytes;
    __m512i c[R][P];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) c[r][p] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int u = 0; u < kKUnits; ++u) {
      // Decode streams each panel from memory: ask for the next super-block an eighth per unit.
      if constexpr (R == 1)
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p)
          for (int off = u * F::kBlockBytes / kKUnits; off < (u + 1) * F::kBlockBytes / kKUnits;
               off += 64)
            _mm_prefetch(reinterpret_cast<const char*>(wp[p] + F::kBlockBytes + off), _MM_HINT_T0);
      __m512i ca[R][P], cb[R][P], p0[P], p1[P];
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const uint8_t* planes = wp[p] + size_t(u) * F::kUnitBytes + kPanelBlockCodes / 2;
        if constexpr (T != DType::Q4_K) p0[p] = _mm512_loadu_si512(planes);
        if constexpr (T == DType::Q6_K) p1[p] = _mm512_loadu_si512(planes + kPanelBlockCodes / 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) ca[r][p] = cb[r][p] = _mm512_setzero_si512();
      }
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        __m512i lo[P], hi[P];
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {
          const __m512i v = _mm512_loadu_si512(wp[p] + size_t(u) * F::kUnitBytes + 64 * t);
          lo[p] = _mm512_and_si512(v, low4);
          hi[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
          if constexpr (T == DType::Q5_K) {
            // Bits t and t + 4 of each plane byte (the AVX2 kernel's shifts).
            lo[p] = _mm512_or_si512(
                lo[p], _mm512_slli_epi16(_mm512_and_si512(p0[p], _mm512_set1_epi8(1)), 4));
            hi[p] = _mm512_ternarylogic_epi32(hi[p], p0[p], _mm512_set1_epi8(0x10), 0xF8);
            p0[p] = _mm512_srli_epi16(p0[p], 1);
          }
          if constexpr (T == DType::Q6_K) {
            // Bits 2t, 2t + 1 of each plane byte moved to bits 4, 5 (the AVX2 kernel's shift),
            // then code | (shifted & 0x30).
            const __m512i bits45 = _mm512_set1_epi8(0x30);
            const auto shifted = [&](__m512i q) __attribute__((always_inline)) {
              return t < 3 ? _mm512_slli_epi16(q, 4 - 2 * t) : _mm512_srli_epi16(q, 2);
            };
            lo[p] = _mm512_ternarylogic_epi32(lo[p], shifted(p0[p]), bits45, 0xF8);
            hi[p] = _mm512_ternarylogic_epi32(hi[p], shifted(p1[p]), bits45, 0xF8);
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const int8_t* qs = xr[r][b].qs + 32 * u + 4 * t;
          const __m512i a0 = broadcast4(qs), a1 = broadcast4(qs + 16);
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p) {
            ca[r][p] = _mm512_dpbusd_epi32(ca[r][p], lo[p], a0);
            cb[r][p] = _mm512_dpbusd_epi32(cb[r][p], hi[p], a1);
          }
        }
      }
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const uint8_t* scales = wp[p] + kquant_scales_offset(T);
        if constexpr (F::kTwoScales) {
          const __m512i sa = scales32(scales + 2 * u * kPanelRows),
                        sb = scales32(scales + (2 * u + 1) * kPanelRows);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
            c[r][p] = _mm512_add_epi32(c[r][p], _mm512_add_epi32(_mm512_mullo_epi32(ca[r][p], sa),
                                                                 _mm512_mullo_epi32(cb[r][p], sb)));
        } else {
          const __m512i s = scales32(scales + u * kPanelRows);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
            c[r][p] = _mm512_add_epi32(c[r][p],
                                       _mm512_mullo_epi32(_mm512_add_epi32(ca[r][p], cb[r][p]), s));
        }
      }
    }
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) epilogue<T, R, P>(wp[p], p, c, xr, b, acc);
  }
  store_tile<R, P>(g, panel, row, acc);
}

// R activation rows of one panel over its converted codes `conv` (kquant_panels.h); scales from
// the packed panel.
template <DType T, int R>
void byte_tile(const KQuantGemm& g, int64_t panel, const uint8_t* conv, int64_t row) {
  using F = KFormat<T>;
  const int64_t nb = g.k / QK_K;
  const uint8_t* wp = g.w + size_t(panel) * size_t(nb) * F::kBlockBytes;
  const BlockQ8_K* xr[R];
  __m512 acc[R][1];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xr[r] = reinterpret_cast<const BlockQ8_K*>(g.x + size_t(row + r) * g.x_stride);
    acc[r][0] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b, wp += F::kBlockBytes) {
    const uint8_t* scales = wp + kquant_scales_offset(T);
    __m512i c[R][1];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) c[r][0] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int u = 0; u < kKUnits; ++u, conv += kKUnitCodeBytes) {
      __m512i ca[R], cb[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) ca[r] = cb[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m512i w = _mm512_load_si512(conv + 64 * q);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512i a = broadcast4(xr[r][b].qs + 32 * u + 4 * q);
          if (q < 4) {
            ca[r] = _mm512_dpbusd_epi32(ca[r], w, a);
          } else {
            cb[r] = _mm512_dpbusd_epi32(cb[r], w, a);
          }
        }
      }
      if constexpr (F::kTwoScales) {
        const __m512i sa = scales32(scales + 2 * u * kPanelRows),
                      sb = scales32(scales + (2 * u + 1) * kPanelRows);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          c[r][0] = _mm512_add_epi32(c[r][0], _mm512_add_epi32(_mm512_mullo_epi32(ca[r], sa),
                                                               _mm512_mullo_epi32(cb[r], sb)));
      } else {
        const __m512i sc = scales32(scales + u * kPanelRows);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          c[r][0] =
              _mm512_add_epi32(c[r][0], _mm512_mullo_epi32(_mm512_add_epi32(ca[r], cb[r]), sc));
      }
    }
    epilogue<T, R, 1>(wp, 0, c, xr, b, acc);
  }
  store_tile<R, 1>(g, panel, row, acc);
}

// One row takes two panels per tile (four independent dpbusd chains); more rows one panel.
template <DType T, int R>
void rows(const KQuantGemm& g, int64_t p0, int64_t p1, int64_t row) {
  constexpr int P = R == 1 ? 2 : 1;
  int64_t p = p0;
  for (; p + P <= p1; p += P) tile<T, R, P>(g, p, row);
  for (; p < p1; ++p) tile<T, R, 1>(g, p, row);
}

// Panels are taken in chunks of about this many bytes, which stay in L2 while every row tile
// passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <DType T>
void gemm(const KQuantGemm& g, int64_t p0, int64_t p1) {
  const int64_t nb = g.k / QK_K;
  const size_t panel_bytes = size_t(nb) * kquant_block_bytes(T);
  const int64_t chunk = std::max<int64_t>(2, int64_t(kPanelChunkBytes / panel_bytes));
  if (g.m >= kKConvertRows) {
    for_converted_chunks(g, p0, p1, chunk,
                         [&](int64_t c0, int64_t c1, const uint8_t* conv, size_t converted) {
                           int64_t row = 0;
                           const auto run = [&]<int kR>() {
                             for (int64_t p = c0; p < c1; ++p)
                               byte_tile<T, kR>(g, p, conv + size_t(p - c0) * converted, row);
                             row += kR;
                           };
                           while (row + 8 <= g.m) run.template operator()<8>();
                           while (row + 2 <= g.m) run.template operator()<2>();
                           if (row < g.m) run.template operator()<1>();
                         });
    return;
  }
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    int64_t row = 0;
    for (; row + 4 <= g.m; row += 4) rows<T, 4>(g, c0, c1, row);
    for (; row + 2 <= g.m; row += 2) rows<T, 2>(g, c0, c1, row);
    if (row < g.m) rows<T, 1>(g, c0, c1, row);
  }
}

void kquant_gemm(const KQuantGemm& g, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::Q4_K:
      return gemm<DType::Q4_K>(g, p0, p1);
    case DType::Q5_K:
      return gemm<DType::Q5_K>(g, p0, p1);
    default:
      return gemm<DType::Q6_K>(g, p0, p1);
  }
}

}  // namespace

KQuantGemmFn avx512_kquant_gemm() {
  return kquant_gemm;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
KQuantGemmFn avx512_kquant_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
