// backend/cpu/kquant_gemm_avx2.h — the 8-lane GEMM over K-quant panels (kquant_panels.h) that
// the AVX2 and AVX-VNNI kernels share: each 64-byte quad-row vector taken as two 32-byte halves,
// rows 0–7 and 8–15 of the panel, as eight lanes. Per unit of 32 elements, four activation codes
// broadcast to every lane meet a half in maddubs, the pair sums of a few chunks added in int16
// (no saturation: see KFormat) and widened and scaled by one madd with the lanes' sub-block
// scale — or, with kVnni, in VEX vpdpbusd into int32 sums scaled by vpmulld. Batches of
// kKConvertRows or more read the codes converted to bytes (for_converted_chunks) instead of
// unpacking them per tile. All integers are exact, so c, m and the two fmas per super-block are
// kquant_dot.h's, bit for bit.
//
// Include only from the two kernel files; everything here is in an unnamed namespace, so each
// keeps its own copy, compiled with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/kquant_panels.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

template <DType T>
struct KFormat {
  static constexpr bool kMin = kquant_has_min(T);
  // Q6_K has a scale per half unit (quad rows 0–3, 4–7): the low and high nibbles of a chunk
  // then go to two accumulators.
  static constexpr bool kTwoScales = T == DType::Q6_K;
  static constexpr int kUnitBytes = int(kquant_unit_bytes(T));
  static constexpr int kBlockBytes = int(kquant_block_bytes(T));
  // Chunks summed in int16 before the madd: with |x| <= 127, Q4_K's two maddubs per chunk of
  // codes below 16 reach 4 · 2 · 2 · 15 · 127 = 30480 over four chunks; Q5_K's (below 32)
  // 2 · 2 · 2 · 31 · 127 = 31496 over two; Q6_K's one per accumulator (below 64)
  // 2 · 2 · 63 · 127 = 32004 over two.
  static constexpr int kInt16Chunks = T == DType::Q4_K ? 4 : 2;
  // Activation rows per tile: Q6_K's two accumulators per row leave room for two.
  static constexpr int kRows = T == DType::Q6_K ? 2 : 4;
};

__m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Eight rows' byte values a and b (signed) as int16 pairs (a, b) in eight 32-bit lanes: the
// operand of a madd against pair sums.
__m256i int16_pairs(const uint8_t* a, const uint8_t* b) {
  return _mm256_cvtepi8_epi16(
      _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

// The same with a = b: each row's scale in both halves of its lane.
__m256i int16_twins(const uint8_t* a) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
}

// A unit's higher-bit planes for half h (Q5_K: one, Q6_K: two), as unpack_chunk consumes them.
template <DType T>
struct Planes {
  __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();
  Planes(const uint8_t* unit, int h) {
    const uint8_t* planes = unit + kPanelBlockCodes / 2 + 32 * h;
    if constexpr (T != DType::Q4_K)
      p0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(planes));
    if constexpr (T == DType::Q6_K)
      p1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(planes + kPanelBlockCodes / 8));
  }
};

// Chunk t of a unit's half h as unsigned codes: quad row t (lo) and quad row t + 4 (hi). Call for
// t = 0..3 in order (Q5_K's plane is shifted as it is consumed).
template <DType T>
__attribute__((always_inline)) inline void unpack_chunk(const uint8_t* unit, int h, int t,
                                                        Planes<T>& planes, __m256i& lo,
                                                        __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0xF);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 64 * t + 32 * h));
  lo = _mm256_and_si256(v, low4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  if constexpr (T == DType::Q5_K) {
    // Bit t of each plane byte is quad row t's fifth bit, bit t + 4 quad row t + 4's; t right
    // shifts bring them to bits 0 and 4 (16-bit shifts: a neighbour's bits arrive above bit 4
    // only after four).
    __m256i& p = planes.p0;
    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(p, _mm256_set1_epi8(1)), 4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(p, _mm256_set1_epi8(0x10)));
    p = _mm256_srli_epi16(p, 1);
  }
  if constexpr (T == DType::Q6_K) {
    // Bits 2t, 2t + 1 of each plane byte moved to bits 4, 5 by one 16-bit shift (the bits it
    // moves in from the byte's neighbour land outside 4, 5) and masked.
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    const auto high = [&](__m256i p) __attribute__((always_inline)) {
      return _mm256_and_si256(t < 3 ? _mm256_slli_epi16(p, 4 - 2 * t) : _mm256_srli_epi16(p, 2),
                              bits45);
    };
    lo = _mm256_or_si256(lo, high(planes.p0));
    hi = _mm256_or_si256(hi, high(planes.p1));
  }
}

// The end of super-block b for R activation rows: c the rows' integer sums of half h of the
// panel block at wp; the mins (or Q6_K's offset) and the two fmas of kquant_dot.h.
template <DType T, int R>
__attribute__((always_inline)) inline void epilogue(const uint8_t* wp, int h, __m256i (&c)[R],
                                                    const BlockQ8_K* const (&xr)[R], int64_t b,
                                                    __m256 (&acc)[R]) {
  using F = KFormat<T>;
  const uint8_t* dp = wp + kquant_d_offset(T) + 16 * h;
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dp)));
  const __m256 dmin =
      F::kMin ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dp + 32)))
              : _mm256_setzero_ps();
  // The lanes' int16 pairs the madds take, once for every activation row: Q6_K's sub-block
  // scales (sc_2p, sc_2p+1), Q4_K's and Q5_K's mins (mn_2p, mn_2p+1).
  constexpr int kPairs = F::kMin ? 4 : 8;
  const uint8_t* paired = wp + (F::kMin ? kquant_mins_offset(T) : kquant_scales_offset(T)) + 8 * h;
  __m256i pairs[kPairs];
#pragma GCC unroll 8
  for (int p = 0; p < kPairs; ++p)
    pairs[p] = int16_pairs(paired + 2 * p * kPanelRows, paired + (2 * p + 1) * kPanelRows);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const BlockQ8_K& y = xr[r][b];
    const __m256 yd = _mm256_set1_ps(y.d);
    int32_t ypair[kPairs];
    kquant_activation_pairs(y, F::kMin, ypair);
    __m256i paired_sum = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < kPairs; ++p)
      paired_sum =
          _mm256_add_epi32(paired_sum, _mm256_madd_epi16(pairs[p], _mm256_set1_epi32(ypair[p])));
    if constexpr (F::kMin) {
      // m = Σ_j mn_j·Y_j.
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[r]), _mm256_mul_ps(dw, yd), acc[r]);
      acc[r] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), paired_sum)),
                          _mm256_mul_ps(dmin, yd), acc[r]);
    } else {
      // Unsigned codes u = q + 32: c less 32·Σ_j sc_j·bsums_j.
      const __m256i cs = _mm256_sub_epi32(c[r], _mm256_slli_epi32(paired_sum, 5));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(cs), _mm256_mul_ps(dw, yd), acc[r]);
    }
  }
}

template <int R>
void store_tile(const KQuantGemm& g, int64_t panel, int h, int64_t row, const __m256 (&acc)[R]) {
  const int valid = int(std::min<int64_t>(8, g.n - panel * kPanelRows - 8 * h));
  if (valid <= 0) return;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float* y = g.y + (row + r) * g.y_stride + panel * kPanelRows + 8 * h;
    if (valid >= 8) {
      _mm256_storeu_ps(y, acc[r]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(y, tmp, size_t(valid) * sizeof(float));
    }
  }
}

// VNNI: c += the unit's int32 sums scaled by their sub-block scales (ca, cb: quad rows 0–3 and
// 4–7; one scale for both but in Q6_K). The sums pass int16, so vpmulld, not madd.
template <DType T, int R>
__attribute__((always_inline)) inline void scale_unit(const uint8_t* scales, int ja,
                                                      const __m256i (&ca)[R],
                                                      const __m256i (&cb)[R], __m256i (&c)[R]) {
  const auto s32 = [](const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  };
  const __m256i sa = s32(scales + ja * kPanelRows);
  if constexpr (KFormat<T>::kTwoScales) {
    const __m256i sb = s32(scales + (ja + 1) * kPanelRows);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      c[r] = _mm256_add_epi32(
          c[r], _mm256_add_epi32(_mm256_mullo_epi32(ca[r], sa), _mm256_mullo_epi32(cb[r], sb)));
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      c[r] = _mm256_add_epi32(c[r], _mm256_mullo_epi32(_mm256_add_epi32(ca[r], cb[r]), sa));
  }
}

// The walk both tiles share over half h of a panel for R rows: per super-block, unit(wp, b, u,
// xr, c) adds each unit's integer sums to c, then the epilogue; the outputs stored at the end.
template <DType T, int R, typename Unit>
__attribute__((always_inline)) inline void half_panel(const KQuantGemm& g, int64_t panel, int h,
                                                      int64_t row, const Unit& unit) {
  using F = KFormat<T>;
  const int64_t nb = g.k / QK_K;
  const uint8_t* wp = g.w + size_t(panel) * size_t(nb) * F::kBlockBytes;
  const BlockQ8_K* xr[R];
  __m256 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    xr[r] = reinterpret_cast<const BlockQ8_K*>(g.x + size_t(row + r) * g.x_stride);
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b, wp += F::kBlockBytes) {
    __m256i c[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) c[r] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int u = 0; u < kKUnits; ++u) unit(wp, b, u, xr, c);
    epilogue<T, R>(wp, h, c, xr, b, acc);
  }
  store_tile<R>(g, panel, h, row, acc);
}

// Half h of a panel for R rows, unpacking the codes as it goes: decode and small batches.
template <bool kVnni, DType T, int R>
void tile(const KQuantGemm& g, int64_t panel, int h, int64_t row) {
  using F = KFormat<T>;
  half_panel<T, R>(
      g, panel, h, row,
      [&](const uint8_t* wp, int64_t b, int u, const BlockQ8_K* const(&xr)[R], __m256i(&c)[R])
          __attribute__((always_inline)) {
            const uint8_t* scales = wp + kquant_scales_offset(T) + 8 * h;
            const uint8_t* unit = wp + size_t(u) * F::kUnitBytes;
            // Decode streams each panel from memory (the second half's pass finds it in cache): ask
            // for the next super-block an eighth per unit (docs/benchmarks.md has the measurement).
            if (R == 1 && h == 0)
              for (int off = u * F::kBlockBytes / kKUnits; off < (u + 1) * F::kBlockBytes / kKUnits;
                   off += 64)
                _mm_prefetch(reinterpret_cast<const char*>(wp + F::kBlockBytes + off), _MM_HINT_T0);
            const int ja = F::kTwoScales ? 2 * u : u;
            const __m256i sc_a = int16_twins(scales + ja * kPanelRows);
            const __m256i sc_b = F::kTwoScales ? int16_twins(scales + (ja + 1) * kPanelRows) : sc_a;
            Planes<T> planes(unit, h);
            __m256i c16a[R], c16b[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) c16a[r] = c16b[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) {
              __m256i lo, hi;
              unpack_chunk<T>(unit, h, t, planes, lo, hi);
#pragma GCC unroll 4
              for (int r = 0; r < R; ++r) {
                const int8_t* qs = xr[r][b].qs + 32 * u + 4 * t;
                if constexpr (kVnni) {
                  // int32 sums of the unit's two halves (quad rows 0–3 and 4–7), scaled below.
                  c16a[r] = _mm256_dpbusd_avx_epi32(c16a[r], lo, broadcast4(qs));
                  c16b[r] = _mm256_dpbusd_avx_epi32(c16b[r], hi, broadcast4(qs + 16));
                  continue;
                }
                const __m256i plo = _mm256_maddubs_epi16(lo, broadcast4(qs));
                const __m256i phi = _mm256_maddubs_epi16(hi, broadcast4(qs + 16));
                if constexpr (F::kTwoScales) {
                  c16a[r] = _mm256_add_epi16(c16a[r], plo);
                  c16b[r] = _mm256_add_epi16(c16b[r], phi);
                } else {
                  c16a[r] = _mm256_add_epi16(c16a[r], _mm256_add_epi16(plo, phi));
                }
              }
              if (!kVnni && (t + 1) % F::kInt16Chunks == 0) {
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                  c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(c16a[r], sc_a));
                  if constexpr (F::kTwoScales)
                    c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(c16b[r], sc_b));
                  c16a[r] = c16b[r] = _mm256_setzero_si256();
                }
              }
            }
            if constexpr (kVnni) scale_unit<T, R>(scales, ja, c16a, c16b, c);
          });
}

template <DType T>
void convert_panel(const uint8_t* panel, int64_t nb, uint8_t* out) {
  using F = KFormat<T>;
  for (int64_t b = 0; b < nb; ++b, panel += F::kBlockBytes) {
    for (int u = 0; u < kKUnits; ++u, out += kKUnitCodeBytes) {
      const uint8_t* unit = panel + size_t(u) * F::kUnitBytes;
      for (int h = 0; h < 2; ++h) {
        Planes<T> planes(unit, h);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          __m256i lo, hi;
          unpack_chunk<T>(unit, h, t, planes, lo, hi);
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * t + 32 * h), lo);
          _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * (t + 4) + 32 * h), hi);
        }
      }
    }
  }
}

// Half h of a panel for R rows over its converted codes `conv`; scales from the packed panel.
template <bool kVnni, DType T, int R>
void byte_tile(const KQuantGemm& g, int64_t panel, const uint8_t* conv, int h, int64_t row) {
  using F = KFormat<T>;
  half_panel<T, R>(
      g, panel, h, row,
      [&](const uint8_t* wp, int64_t b, int u, const BlockQ8_K* const(&xr)[R],
          __m256i(&c)[R]) __attribute__((always_inline)) {
        const uint8_t* scales = wp + kquant_scales_offset(T) + 8 * h;
        const uint8_t* codes = conv + size_t(b * kKUnits + u) * kKUnitCodeBytes;
        const int ja = F::kTwoScales ? 2 * u : u;
        if constexpr (kVnni) {
          __m256i ca[R], cb[R];
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) ca[r] = cb[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int q = 0; q < 8; ++q) {
            const __m256i w =
                _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 64 * q + 32 * h));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
              __m256i& acc_q = q < 4 ? ca[r] : cb[r];
              acc_q = _mm256_dpbusd_avx_epi32(acc_q, w, broadcast4(xr[r][b].qs + 32 * u + 4 * q));
            }
          }
          scale_unit<T, R>(scales, ja, ca, cb, c);
          return;
        }
    // Quad rows two at a time: a pair of maddubs of codes below 64 stays in int16
    // (2 · 2 · 63 · 127 = 32004), and both lie in one sub-block of every format.
#pragma GCC unroll 1
        for (int q = 0; q < 8; q += 2) {
          const __m256i sc = int16_twins(scales + (F::kTwoScales ? ja + q / 4 : ja) * kPanelRows);
          const __m256i w0 =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 64 * q + 32 * h));
          const __m256i w1 =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 64 * (q + 1) + 32 * h));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const int8_t* qs = xr[r][b].qs + 32 * u + 4 * q;
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, broadcast4(qs)),
                                                 _mm256_maddubs_epi16(w1, broadcast4(qs + 4)));
            c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(s16, sc));
          }
        }
      });
}

template <bool kVnni, DType T, int R>
void rows(const KQuantGemm& g, int64_t p0, int64_t p1, int64_t row) {
  for (int64_t p = p0; p < p1; ++p)
    for (int h = 0; h < 2; ++h) tile<kVnni, T, R>(g, p, h, row);
}

// Panels are taken in chunks of about this many bytes, which stay in L2 while every row tile
// passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <bool kVnni, DType T>
void gemm(const KQuantGemm& g, int64_t p0, int64_t p1) {
  constexpr int R = KFormat<T>::kRows;
  const int64_t nb = g.k / QK_K;
  const size_t panel_bytes = size_t(nb) * kquant_block_bytes(T);
  const int64_t chunk = std::max<int64_t>(1, int64_t(kPanelChunkBytes / panel_bytes));
  if (g.m >= kKConvertRows) {
    for_converted_chunks(
        g, p0, p1, chunk, [&](int64_t c0, int64_t c1, const uint8_t* conv, size_t converted) {
          int64_t row = 0;
          const auto run = [&]<int kR>() {
            for (int64_t p = c0; p < c1; ++p)
              for (int h = 0; h < 2; ++h)
                byte_tile<kVnni, T, kR>(g, p, conv + size_t(p - c0) * converted, h, row);
            row += kR;
          };
          while (row + 6 <= g.m) run.template operator()<6>();
          while (row + 2 <= g.m) run.template operator()<2>();
          if (row < g.m) run.template operator()<1>();
        });
    return;
  }
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    int64_t row = 0;
    for (; row + R <= g.m; row += R) rows<kVnni, T, R>(g, c0, c1, row);
    for (; row + 2 <= g.m; row += 2) rows<kVnni, T, 2>(g, c0, c1, row);
    if (row < g.m) rows<kVnni, T, 1>(g, c0, c1, row);
  }
}

template <bool kVnni>
void kquant_gemm(const KQuantGemm& g, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::Q4_K:
      return gemm<kVnni, DType::Q4_K>(g, p0, p1);
    case DType::Q5_K:
      return gemm<kVnni, DType::Q5_K>(g, p0, p1);
    default:
      return gemm<kVnni, DType::Q6_K>(g, p0, p1);
  }
}

}  // namespace
}  // namespace kestrel::cpu
