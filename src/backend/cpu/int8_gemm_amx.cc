// AMX GEMM over packed I8 weights (int8_matmul.h), for batches: the packed panels' quad rows are
// already the tile unit's B layout (row j of a 64-column chunk: four columns of each of sixteen
// weight rows), and the activation rows (q + 128 codes after a 64-byte header) its A rows, so
// one TDPBUSD multiplies 16 activation rows by 16 weight rows over 64 columns with no
// conversion. Unlike the block-scaled formats (matmul_packed_amx.cc), an I8 row has one scale,
// so the int32 tiles accumulate over the whole row and are stored once: the epilogue (minus
// 128 · Σ w, plus the bias, times a and the row scale) is the VNNI kernel's, and so are the bits.
//
// int4 panels (W4A8) are widened to int8 ones a chunk of panels at a time, in a thread-local
// buffer that stays in L2 while the batch's row tiles pass over it.
//
// A 2 × 2 register tile (two row tiles of the batch, two panels) keeps four accumulators and
// four operand tiles. Panels are padded to whole 64-column chunks with zero codes, and
// activation rows to 64 bytes with zeros, so the last chunk adds nothing; the caller's
// activation buffer has whole sixteen-row tiles (rows past the batch are read, never stored).
#include "backend/cpu/int8_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AMX_TILE__) && defined(__AMX_INT8__)

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/packed_matmul.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

// Tiles (kEightFullTiles) 0–3: int32 sums (16 × 16); 4, 5: activation codes (16 rows × 64
// bytes); 6, 7: weight quad rows (16 × 64 bytes).

constexpr int64_t kChunkBytes = 64 * kPanelRows;  // one 64-column chunk of a panel

// y for activation rows [row, row + 16) ∩ [0, m) and the panel starting at weight row n0, from
// the 16 × 16 sums `c`.
void epilogue(const Int8Gemm& g, const int32_t* c, const uint8_t* panel, int64_t row, int64_t n0) {
  const int valid = int(std::min<int64_t>(kPanelRows, g.n - n0));
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  __m512i bias = _mm512_slli_epi32(_mm512_loadu_si512(panel), 7);  // 128 · Σ w, to subtract
  bias = g.bias != nullptr ? _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mask, g.bias + n0), bias)
                           : _mm512_sub_epi32(_mm512_setzero_si512(), bias);
  const __m512 scale = _mm512_maskz_loadu_ps(mask, g.scale + n0);
  const int rows = int(std::min<int64_t>(kPanelRows, g.m - row));
  for (int r = 0; r < rows; ++r) {
    float a;
    __builtin_memcpy(&a, g.x + size_t(row + r) * g.x_stride, sizeof a);
    const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(c + 16 * r), bias));
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(total, _mm512_set1_ps(a)), scale);
    _mm512_mask_storeu_ps(g.y + (row + r) * g.y_stride + n0, mask, y);
  }
}

// Row tiles t, t + 1 (R of them) against the int8 panel at `panel` (weight rows from n0) and,
// with P = 2, the next one. (GCC's tile intrinsics paste their tile numbers into the assembly
// text: literals only.)
template <int R, int P>
void tile(const Int8Gemm& g, int64_t t, const uint8_t* panel, int64_t n0, int64_t chunks,
          size_t panel_bytes) {
  const auto stride = int64_t(g.x_stride);
  const uint8_t* x0 = g.x + size_t(t) * kPanelRows * g.x_stride + kInt8ActHeaderBytes;
  const uint8_t* x1 = x0 + size_t(kPanelRows) * g.x_stride;
  const uint8_t* w0 = panel + 64;
  const uint8_t* w1 = w0 + panel_bytes;
  _tile_zero(0);
  if constexpr (P == 2) _tile_zero(1);
  if constexpr (R == 2) _tile_zero(2);
  if constexpr (R == 2 && P == 2) _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, x0 + 64 * c, stride);
    _tile_loadd(6, w0 + kChunkBytes * c, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (P == 2) {
      _tile_loadd(7, w1 + kChunkBytes * c, 64);
      _tile_dpbusd(1, 4, 7);
    }
    if constexpr (R == 2) {
      _tile_loadd(5, x1 + 64 * c, stride);
      _tile_dpbusd(2, 5, 6);
      if constexpr (P == 2) _tile_dpbusd(3, 5, 7);
    }
  }
  alignas(64) int32_t c[4][256];
  _tile_stored(0, c[0], 64);
  if constexpr (P == 2) _tile_stored(1, c[1], 64);
  if constexpr (R == 2) _tile_stored(2, c[2], 64);
  if constexpr (R == 2 && P == 2) _tile_stored(3, c[3], 64);
  const int64_t row = t * kPanelRows;
  epilogue(g, c[0], w0 - 64, row, n0);
  if constexpr (P == 2) epilogue(g, c[1], w1 - 64, row, n0 + kPanelRows);
  if constexpr (R == 2) epilogue(g, c[2], w0 - 64, row + kPanelRows, n0);
  if constexpr (R == 2 && P == 2) epilogue(g, c[3], w1 - 64, row + kPanelRows, n0 + kPanelRows);
}

// Row tiles are taken in chunks of about this many bytes of activation codes, and panels in
// chunks of about this many bytes, both staying in L2 while the other passes over them.
constexpr size_t kRowChunkBytes = size_t(1) << 20;
constexpr size_t kPanelChunkBytes = size_t(512) << 10;

// int4 panels (pack_int4_weight) as int8 ones: the tile unit loads its operands from memory, so
// a thread widens a chunk of panels once and every row tile reads them.
void widen_int4_panels(const uint8_t* src, int64_t count, int64_t k, uint8_t* dst) {
  const size_t from = int4_packed_panel_bytes(k), to = int8_packed_panel_bytes(k);
  const int64_t chunks = (k + 63) / 64;
  const __m512i low4 = _mm512_set1_epi8(0xF), eight = _mm512_set1_epi8(8);
  for (int64_t p = 0; p < count; ++p, src += from, dst += to) {
    _mm512_store_si512(dst, _mm512_loadu_si512(src));  // the column sums
    for (int64_t c = 0; c < chunks; ++c)
      for (int v = 0; v < 8; ++v) {
        const __m512i packed = _mm512_loadu_si512(src + 64 + c * 32 * kPanelRows + 64 * v);
        uint8_t* out = dst + 64 + c * kChunkBytes;
        _mm512_store_si512(out + 64 * v, _mm512_sub_epi8(_mm512_and_si512(packed, low4), eight));
        _mm512_store_si512(
            out + 64 * (v + 8),
            _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(packed, 4), low4), eight));
      }
  }
}

// A chunk of int4 panels widened to int8, kept by the thread's arena.
struct WidenedPanels {
  std::vector<uint8_t> bytes;
};

void gemm(const Int8Gemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = int8_packed_panel_bytes(g.k);
  const int64_t chunks = (g.k + 63) / 64;
  const int64_t tiles = (g.m + kPanelRows - 1) / kPanelRows;
  const int64_t row_chunk =
      std::max<int64_t>(2, int64_t(kRowChunkBytes / (kPanelRows * g.x_stride)));
  const int64_t panel_chunk = std::max<int64_t>(2, int64_t(kPanelChunkBytes / panel_bytes));
  ScratchArena own;
  std::vector<uint8_t>& widened =
      (g.scratch != nullptr ? *g.scratch : own).get<WidenedPanels>().bytes;
  uint8_t* buffer =
      g.int4 ? cache_aligned(widened, size_t(std::min(panel_chunk, p1 - p0)) * panel_bytes)
             : nullptr;
  _tile_loadconfig(&kEightFullTiles);
  for (int64_t c0 = p0; c0 < p1; c0 += panel_chunk) {
    const int64_t c1 = std::min(p1, c0 + panel_chunk);
    const uint8_t* base = g.w + size_t(c0) * panel_bytes;
    if (g.int4) {
      widen_int4_panels(g.w + size_t(c0) * int4_packed_panel_bytes(g.k), c1 - c0, g.k, buffer);
      base = buffer;
    }
    for (int64_t t0 = 0; t0 < tiles; t0 += row_chunk) {
      const int64_t t1 = std::min(tiles, t0 + row_chunk);
      for (int64_t t = t0; t < t1; t += 2) {
        for (int64_t p = c0; p < c1; p += 2) {
          const uint8_t* panel = base + size_t(p - c0) * panel_bytes;
          const int64_t n0 = p * kPanelRows;
          const bool pair = p + 1 < c1;
          if (t + 1 < t1) {
            pair ? tile<2, 2>(g, t, panel, n0, chunks, panel_bytes)
                 : tile<2, 1>(g, t, panel, n0, chunks, panel_bytes);
          } else {
            pair ? tile<1, 2>(g, t, panel, n0, chunks, panel_bytes)
                 : tile<1, 1>(g, t, panel, n0, chunks, panel_bytes);
          }
        }
      }
    }
  }
  _tile_release();
}

bool amx_permitted() {
  return __builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("avx512bw") &&
         amx_tile_state_granted();
}

}  // namespace

Int8GemmFn amx_int8_gemm() {
  static const bool ok = amx_permitted();
  return ok ? gemm : nullptr;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
Int8GemmFn amx_int8_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
