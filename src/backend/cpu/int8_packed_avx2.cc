// AVX2 GEMM over packed I8 weights, int8 or int4 panels (int8_matmul.h), for CPUs without
// AVX-512 VNNI. AVX2 has no exact int8 dot product (vpmaddubsw's int16 pair sums saturate), so
// for int8 panels each sixteen-byte piece of a quad row (four weight rows × four columns) is
// widened to int16 and meets four activation codes (q + 128, widened to int16 once per row tile
// into a buffer that stays in L1) broadcast to every 64-bit lane: vpmaddwd sums column pairs
// exactly into int32 (each product at most 255 · 128). The int32 sums run over the whole row, then
// each weight row's two pair lanes are added and the VNNI kernel's epilogue runs: the same integer
// sums and float steps, so the same bits as every other int8 kernel. int4 panels cannot saturate
// vpmaddubsw and take it directly (int4_tile).
#include "backend/cpu/int8_matmul.h"

#if defined(__AVX2__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "backend/cpu/packed_matmul.h"

namespace kestrel::cpu {
namespace {

// Activation rows per register tile. int8: 4·R accumulators, R broadcast codes, a weight piece
// and a product fit the sixteen registers; int4: 3·R accumulators and two weight vectors.
constexpr int kInt8Rows = 2;
constexpr int kInt4Rows = 3;

// Row r's codes, widened to int16 (k rounded up to 64, the panels' padded width).
const int16_t* widened_row(const int16_t* buf, int64_t k64, int r) {
  return buf + size_t(r) * size_t(k64);
}

__m256i codes4(const int16_t* row, int64_t col) {
  int64_t four;
  std::memcpy(&four, row + col, sizeof four);
  return _mm256_set1_epi64x(four);
}

// The int32 pair sums of R activation rows against one panel: c[r][j] holds weight rows
// 4j..4j+3, two lanes each (columns 0 + 1 and 2 + 3 of every quad).
template <int R>
struct Sums {
  __m256i c[R][4];
};

template <int R>
void int8_sums(const Int8Gemm& g, const uint8_t* wp, const int16_t* const* xr, Sums<R>& s) {
  const int64_t nb = (g.k + 31) / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* block = wp + 64 + size_t(b) * 32 * kPanelRows;
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m256i a[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r] = codes4(xr[r], 32 * b + 4 * q);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i w = _mm256_cvtepi8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 64 * q + 16 * j)));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
          s.c[r][j] = _mm256_add_epi32(s.c[r][j], _mm256_madd_epi16(a[r], w));
      }
    }
  }
}

// Eight weight rows' sums from the pair lanes of rows 4j..4j+3 and 4j+4..4j+7.
__m256i row_sums(__m256i first, __m256i second) {
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(first, second), 0xD8);
}

// y for eight weight rows n..n+7 (`valid` of them real) of activation row `row`, from their
// integer sums: − 128 · Σ w (the codes carry + 128), + bias, then × a × s_w as every int8 kernel.
void store_rows(const Int8Gemm& g, const uint8_t* wp, int64_t n, int half, int valid, int64_t row,
                __m256i sums) {
  const __m256i mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i wsum =
      _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * half)), 7);
  const __m256i bias = g.bias != nullptr
                           ? _mm256_sub_epi32(_mm256_maskload_epi32(g.bias + n, mask), wsum)
                           : _mm256_sub_epi32(_mm256_setzero_si256(), wsum);
  float a;
  std::memcpy(&a, g.x + size_t(row) * g.x_stride, sizeof a);
  const __m256 total = _mm256_cvtepi32_ps(_mm256_add_epi32(sums, bias));
  const __m256 y =
      _mm256_mul_ps(_mm256_mul_ps(total, _mm256_set1_ps(a)), _mm256_maskload_ps(g.scale + n, mask));
  _mm256_maskstore_ps(g.y + row * g.y_stride + n, mask, y);
}

int valid_rows(const Int8Gemm& g, int64_t n) {
  return int(g.n - n < 8 ? g.n - n : 8);
}

template <int R>
void int8_tile(const Int8Gemm& g, int64_t panel, int64_t row, const int16_t* buf, int64_t k64) {
  const uint8_t* wp = g.w + size_t(panel) * int8_packed_panel_bytes(g.k);
  const int16_t* xr[R];
  Sums<R> s;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xr[r] = widened_row(buf, k64, r);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) s.c[r][j] = _mm256_setzero_si256();
  }
  int8_sums<R>(g, wp, xr, s);
  for (int half = 0; half < 2; ++half) {
    const int64_t n = panel * kPanelRows + 8 * half;
    const int valid = valid_rows(g, n);
    if (valid <= 0) break;  // a last panel of at most eight rows
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      store_rows(g, wp, n, half, valid, row + r, row_sums(s.c[r][2 * half], s.c[r][2 * half + 1]));
  }
}

// int4 panels, one half (eight weight rows: bytes 32·half.. of each vector) at a time. Codes in
// [-8, 7] cannot saturate vpmaddubsw (a pair of products is at most 2 · 255 · 8 in magnitude), so
// the unsigned activation codes meet the nibbles (− 8) directly, eight such int16 pair sums
// accumulate without overflow (8 · 4080 < 32768), and vpmaddwd by one widens them to int32 once
// per 64-column chunk: integers all the way, the same sums as the int8 panels.
template <int R>
void int4_tile(const Int8Gemm& g, int64_t panel, int64_t row) {
  const uint8_t* wp = g.w + size_t(panel) * int4_packed_panel_bytes(g.k);
  const uint8_t* xr[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) xr[r] = g.x + size_t(row + r) * g.x_stride + kInt8ActHeaderBytes;
  const int64_t chunks = (g.k + 63) / 64;
  const __m256i low4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int half = 0; half < 2; ++half) {
    const int64_t n = panel * kPanelRows + 8 * half;
    const int valid = valid_rows(g, n);
    if (valid <= 0) break;
    __m256i acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int64_t c = 0; c < chunks; ++c) {
      const uint8_t* chunk = wp + 64 + size_t(c) * 32 * kPanelRows + 32 * half;
      __m256i lo16[R], hi16[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) lo16[r] = hi16[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 64 * v));
        const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(packed, low4), eight);
        const __m256i hi =
            _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low4), eight);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          int32_t a_lo, a_hi;
          std::memcpy(&a_lo, xr[r] + 64 * c + 4 * v, sizeof a_lo);
          std::memcpy(&a_hi, xr[r] + 64 * c + 32 + 4 * v, sizeof a_hi);
          lo16[r] = _mm256_add_epi16(lo16[r], _mm256_maddubs_epi16(_mm256_set1_epi32(a_lo), lo));
          hi16[r] = _mm256_add_epi16(hi16[r], _mm256_maddubs_epi16(_mm256_set1_epi32(a_hi), hi));
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_add_epi32(acc[r], _mm256_add_epi32(_mm256_madd_epi16(lo16[r], ones),
                                                           _mm256_madd_epi16(hi16[r], ones)));
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) store_rows(g, wp, n, half, valid, row + r, acc[r]);
  }
}

// Panels in chunks that stay in L2 while every row tile passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <int R>
void int8_rows(const Int8Gemm& g, int64_t c0, int64_t c1, int64_t row, int16_t* buf, int64_t k64) {
  for (int r = 0; r < R; ++r) {
    const uint8_t* codes = g.x + size_t(row + r) * g.x_stride + kInt8ActHeaderBytes;
    int16_t* dst = buf + size_t(r) * size_t(k64);
    // Activation rows are zero-padded to 64 codes, as the panels' columns.
    for (int64_t c = 0; c < k64; c += 16)
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(dst + c),
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + c))));
  }
  for (int64_t p = c0; p < c1; ++p) int8_tile<R>(g, p, row, buf, k64);
}

template <int R>
void int4_rows(const Int8Gemm& g, int64_t c0, int64_t c1, int64_t row) {
  for (int64_t p = c0; p < c1; ++p) int4_tile<R>(g, p, row);
}

// Activation rows widened to int16, kept by the thread's arena.
struct WidenedRows {
  std::vector<int16_t> codes;
};

void gemm_any(const Int8Gemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = g.int4 ? int4_packed_panel_bytes(g.k) : int8_packed_panel_bytes(g.k);
  const int64_t fit = int64_t(kPanelChunkBytes / panel_bytes);
  const int64_t chunk = fit > 4 ? fit : 4;
  const int64_t k64 = (g.k + 63) / 64 * 64;
  ScratchArena own;
  std::vector<int16_t>& widened =
      (g.scratch != nullptr ? *g.scratch : own).get<WidenedRows>().codes;
  if (!g.int4 && widened.size() < size_t(kInt8Rows * k64)) widened.resize(size_t(kInt8Rows * k64));
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = c0 + chunk < p1 ? c0 + chunk : p1;
    int64_t row = 0;
    if (g.int4) {
      for (; row + kInt4Rows <= g.m; row += kInt4Rows) int4_rows<kInt4Rows>(g, c0, c1, row);
      for (; row < g.m; ++row) int4_rows<1>(g, c0, c1, row);
    } else {
      for (; row + kInt8Rows <= g.m; row += kInt8Rows)
        int8_rows<kInt8Rows>(g, c0, c1, row, widened.data(), k64);
      for (; row < g.m; ++row) int8_rows<1>(g, c0, c1, row, widened.data(), k64);
    }
  }
}

}  // namespace

Int8GemmFn avx2_int8_gemm() {
  return gemm_any;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
Int8GemmFn avx2_int8_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
