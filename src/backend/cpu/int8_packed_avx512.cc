// AVX-512 VNNI GEMM over packed I8 weights, int8 or int4 panels (int8_matmul.h): a register tile
// of R activation rows × P panels. Four activation codes (q + 128, unsigned) broadcast to every
// lane meet a quad row of sixteen weight rows (signed) in one _mm512_dpbusd_epi32; the int32 sums
// run over the whole row, and only then does the epilogue subtract 128 · Σ w, add the bias and
// scale — the row kernels' integer and float steps, so the same bits.
//
// This file is compiled with AVX-512 flags, so it must not create out-of-line code the linker
// could share with other files: intrinsics and its unnamed namespace only.
#include "backend/cpu/int8_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/packed_matmul.h"

namespace kestrel::cpu {
namespace {

// The int32 sums of R activation rows against P panels, over every column.
template <int R, int P>
struct Sums {
  __m512i c[R][P];
};

// Four activation codes of row r at column `col`, broadcast.
__m512i codes4(const uint8_t* row, int64_t col) {
  int32_t four;
  __builtin_memcpy(&four, row + col, sizeof four);
  return _mm512_set1_epi32(four);
}

template <int R, int P>
void int8_sums(const Int8Gemm& g, const uint8_t* const* wp, const uint8_t* const* xr,
               Sums<R, P>& s) {
  const int64_t nb = (g.k + 31) / 32;
  for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m512i w[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p)
        w[p] = _mm512_loadu_si512(wp[p] + 64 + size_t(b) * 32 * kPanelRows + 64 * q);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i a = codes4(xr[r], 32 * b + 4 * q);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) s.c[r][p] = _mm512_dpbusd_epi32(s.c[r][p], a, w[p]);
      }
    }
  }
}

// int4 panels: each vector widens to two quad rows (nibble − 8) of the chunk, the int8 codes.
template <int R, int P>
void int4_sums(const Int8Gemm& g, const uint8_t* const* wp, const uint8_t* const* xr,
               Sums<R, P>& s) {
  const int64_t chunks = (g.k + 63) / 64;
  const __m512i low4 = _mm512_set1_epi8(0xF), eight = _mm512_set1_epi8(8);
  for (int64_t c = 0; c < chunks; ++c) {
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      __m512i lo[P], hi[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const __m512i packed =
            _mm512_loadu_si512(wp[p] + 64 + size_t(c) * 32 * kPanelRows + 64 * v);
        lo[p] = _mm512_sub_epi8(_mm512_and_si512(packed, low4), eight);
        hi[p] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(packed, 4), low4), eight);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i a_lo = codes4(xr[r], 64 * c + 4 * v);
        const __m512i a_hi = codes4(xr[r], 64 * c + 32 + 4 * v);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
          s.c[r][p] = _mm512_dpbusd_epi32(s.c[r][p], a_lo, lo[p]);
          s.c[r][p] = _mm512_dpbusd_epi32(s.c[r][p], a_hi, hi[p]);
        }
      }
    }
  }
}

template <bool Int4, int R, int P>
void tile(const Int8Gemm& g, int64_t panel, int64_t row) {
  const size_t panel_bytes = Int4 ? int4_packed_panel_bytes(g.k) : int8_packed_panel_bytes(g.k);
  const uint8_t* wp[P];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) wp[p] = g.w + size_t(panel + p) * panel_bytes;
  const uint8_t* xr[R];
  Sums<R, P> s;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xr[r] = g.x + size_t(row + r) * g.x_stride + kInt8ActHeaderBytes;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) s.c[r][p] = _mm512_setzero_si512();
  }
  if constexpr (Int4) {
    int4_sums<R, P>(g, wp, xr, s);
  } else {
    int8_sums<R, P>(g, wp, xr, s);
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const int64_t n0 = (panel + p) * kPanelRows;
    const int valid = int(g.n - n0 < kPanelRows ? g.n - n0 : kPanelRows);
    const __mmask16 mask = __mmask16((1u << valid) - 1);
    const __m512i wsum = _mm512_loadu_si512(wp[p]);
    __m512i bias = _mm512_slli_epi32(wsum, 7);  // 128 · Σ w, to subtract
    bias = g.bias != nullptr ? _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mask, g.bias + n0), bias)
                             : _mm512_sub_epi32(_mm512_setzero_si512(), bias);
    const __m512 scale = _mm512_maskz_loadu_ps(mask, g.scale + n0);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float a;
      __builtin_memcpy(&a, g.x + size_t(row + r) * g.x_stride, sizeof a);
      const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(s.c[r][p], bias));
      const __m512 y = _mm512_mul_ps(_mm512_mul_ps(total, _mm512_set1_ps(a)), scale);
      _mm512_mask_storeu_ps(g.y + (row + r) * g.y_stride + n0, mask, y);
    }
  }
}

template <bool Int4, int R>
void rows(const Int8Gemm& g, int64_t p0, int64_t p1, int64_t row) {
  constexpr int P = R <= 2 ? 4 : 2;
  int64_t p = p0;
  for (; p + P <= p1; p += P) tile<Int4, R, P>(g, p, row);
  for (; p < p1; ++p) tile<Int4, R, 1>(g, p, row);
}

// Panels in chunks that stay in L2 while every row tile passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <bool Int4>
void gemm(const Int8Gemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = Int4 ? int4_packed_panel_bytes(g.k) : int8_packed_panel_bytes(g.k);
  const int64_t fit = int64_t(kPanelChunkBytes / panel_bytes);
  const int64_t chunk = fit > 4 ? fit : 4;
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = c0 + chunk < p1 ? c0 + chunk : p1;
    for (int64_t row = 0; row < g.m; row += 4) {
      switch (g.m - row < 4 ? g.m - row : 4) {
        case 1:
          rows<Int4, 1>(g, c0, c1, row);
          break;
        case 2:
          rows<Int4, 2>(g, c0, c1, row);
          break;
        case 3:
          rows<Int4, 3>(g, c0, c1, row);
          break;
        default:
          rows<Int4, 4>(g, c0, c1, row);
      }
    }
  }
}

void gemm_any(const Int8Gemm& g, int64_t p0, int64_t p1) {
  g.int4 ? gemm<true>(g, p0, p1) : gemm<false>(g, p0, p1);
}

}  // namespace

Int8GemmFn avx512_int8_gemm() {
  return gemm_any;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
Int8GemmFn avx512_int8_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
