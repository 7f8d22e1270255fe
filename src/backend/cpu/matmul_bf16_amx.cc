// AMX bf16 GEMM over bf16 tiles (bf16_tiles.h): per two tiles of sixteen activation rows and two
// panels (fewer at the edges), one TDPBF16PS per tile pair and 32-element block into f32 result
// tiles that stay in the tile registers for all of K, then one store per tile. Unlike the int8
// formats there are no per-block scales, so nothing but the tile unit runs in the loop.
#include "backend/cpu/bf16_tiles.h"

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && \
    defined(__AMX_BF16__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/amx_tiles.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

// Tiles (kEightFullTiles) 0–3: f32 results (16 rows × 16 lanes) of two row tiles × two panels;
// 4 and 5: the row tiles' activations (16 rows × 32 bf16); 6 and 7: the panels' weights (16 pair
// rows × 64 bytes).

constexpr size_t kBlockBytes = size_t(kPanelRows) * kBf16TileK * 2;

// Stores a result tile: straight into y when all sixteen rows and columns are real, else
// through a buffer.
#define KESTREL_STORE_RESULT(TILE, Y, ROWS, COLS, YS)                                    \
  do {                                                                                   \
    if ((ROWS) == kPanelRows && (COLS) == kPanelRows) {                                  \
      _tile_stored(TILE, (Y), (YS)*int64_t(sizeof(float)));                              \
    } else {                                                                             \
      alignas(64) float buf[kPanelRows * kPanelRows];                                    \
      _tile_stored(TILE, buf, 64);                                                       \
      for (int r = 0; r < (ROWS); ++r)                                                   \
        std::memcpy((Y) + r * (YS), buf + r * kPanelRows, size_t(COLS) * sizeof(float)); \
    }                                                                                    \
  } while (false)

// Row tiles are taken in chunks of about this many bytes of activations, which stay in L2 while
// the thread's panels pass over them.
constexpr size_t kRowChunkBytes = size_t(1) << 20;

void gemm(const Bf16Gemm& g, int64_t p0, int64_t p1) {
  const int64_t nb = bf16_tile_blocks(g.k);
  const size_t panel_bytes = bf16_tile_panel_bytes(g.k);
  const auto stride = int64_t(g.x_stride);
  const int64_t tiles = packed_activation_rows(g.m) / kPanelRows;
  const int64_t chunk = std::max<int64_t>(1, int64_t(kRowChunkBytes / (kPanelRows * g.x_stride)));
  _tile_loadconfig(&kEightFullTiles);
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
    const int64_t t1 = std::min(tiles, t0 + chunk);
    for (int64_t p = p0; p < p1; p += 2) {
      const bool pair = p + 1 < p1;
      const uint8_t* b0 = g.w + size_t(p) * panel_bytes;
      const uint8_t* b1 = b0 + panel_bytes;
      const int cols0 = int(std::min<int64_t>(kPanelRows, g.n - p * kPanelRows));
      const int cols1 = pair ? int(std::min<int64_t>(kPanelRows, g.n - (p + 1) * kPanelRows)) : 0;
      for (int64_t t = t0; t < t1;) {
        const auto* a = reinterpret_cast<const uint8_t*>(g.x) + size_t(t) * kPanelRows * g.x_stride;
        float* y = g.y + t * kPanelRows * g.y_stride + p * kPanelRows;
        const int rows = int(std::min<int64_t>(kPanelRows, g.m - t * kPanelRows));
        if (pair && t + 1 < t1) {
          // Two row tiles × two panels: each loaded tile feeds two products.
          const uint8_t* a1 = a + kPanelRows * g.x_stride;
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
          for (int64_t b = 0; b < nb; ++b) {
            _tile_loadd(4, a + 64 * b, stride);
            _tile_loadd(5, a1 + 64 * b, stride);
            _tile_loadd(6, b0 + kBlockBytes * b, 64);
            _tile_loadd(7, b1 + kBlockBytes * b, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          const int rows1 = int(std::min<int64_t>(kPanelRows, g.m - (t + 1) * kPanelRows));
          float* y1 = y + kPanelRows * g.y_stride;
          KESTREL_STORE_RESULT(0, y, rows, cols0, g.y_stride);
          KESTREL_STORE_RESULT(1, y + kPanelRows, rows, cols1, g.y_stride);
          KESTREL_STORE_RESULT(2, y1, rows1, cols0, g.y_stride);
          KESTREL_STORE_RESULT(3, y1 + kPanelRows, rows1, cols1, g.y_stride);
          t += 2;
          continue;
        }
        _tile_zero(0);
        if (pair) {
          _tile_zero(1);
          for (int64_t b = 0; b < nb; ++b) {
            _tile_loadd(4, a + 64 * b, stride);
            _tile_loadd(6, b0 + kBlockBytes * b, 64);
            _tile_loadd(7, b1 + kBlockBytes * b, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
          }
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            _tile_loadd(4, a + 64 * b, stride);
            _tile_loadd(6, b0 + kBlockBytes * b, 64);
            _tile_dpbf16ps(0, 4, 6);
          }
        }
        KESTREL_STORE_RESULT(0, y, rows, cols0, g.y_stride);
        if (pair) KESTREL_STORE_RESULT(1, y + kPanelRows, rows, cols1, g.y_stride);
        ++t;
      }
    }
  }
  _tile_release();
}

bool amx_bf16_permitted() {
  return __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("avx512bf16") &&
         amx_tile_state_granted();
}

}  // namespace

Bf16GemmFn amx_bf16_gemm() {
  static const bool ok = amx_bf16_permitted();
  return ok ? gemm : nullptr;
}

// Sixteen at a time with VCVTNEPS2BF16 (round to nearest even, as f32_to_bf16; it reads input
// denormals as zero, as the tile products do anyway).
void round_rows_to_bf16(const float* x, int64_t k, uint16_t* dst, size_t stride, int64_t r0,
                        int64_t r1) {
  const int64_t kp = bf16_tile_blocks(k) * kBf16TileK;
  for (int64_t r = r0; r < r1; ++r) {
    auto* d = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dst) + size_t(r) * stride);
    const float* xr = x + r * k;
    for (int64_t i = 0; i < kp; i += 16) {
      const auto m = __mmask16(k - i >= 16 ? 0xFFFF : k > i ? (1u << (k - i)) - 1 : 0);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, xr + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), reinterpret_cast<const __m256i&>(h));
    }
  }
}

}  // namespace kestrel::cpu

#else

#include "base/fp16.h"

namespace kestrel::cpu {
Bf16GemmFn amx_bf16_gemm() {
  return nullptr;
}
void round_rows_to_bf16(const float* x, int64_t k, uint16_t* dst, size_t stride, int64_t r0,
                        int64_t r1) {
  const int64_t kp = bf16_tile_blocks(k) * kBf16TileK;
  for (int64_t r = r0; r < r1; ++r) {
    auto* d = reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dst) + size_t(r) * stride);
    for (int64_t i = 0; i < kp; ++i) d[i] = i < k ? f32_to_bf16(x[r * k + i]) : 0;
  }
}
}  // namespace kestrel::cpu

#endif
