// AVX-512 float GEMM over float panels (float_panels.h): a register tile of R activation rows × P
// panels; per k, P weight vectors (converted once) meet R broadcast activations. K runs in chunks
// that keep the tile's weights in L1; between chunks the accumulators go through y, which is
// exact, so the per-output FMA sequence is the one float_panels.h states.
#include "backend/cpu/float_panels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

template <DType T>
__attribute__((always_inline)) inline __m512 load_weights(const uint8_t* p) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
}

constexpr int64_t kElemBytes(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// Elements of K per chunk: R = 6 rows × 4 panels of f16 weights read 32 KiB per chunk.
constexpr int64_t kChunk = 256;

// Where a tile reads the weights of K chunk [k0, k1): panel p's element k0 + i at
// base + p * panel_stride + i * 16 elements, in dtype T.
struct ChunkWeights {
  const uint8_t* base;  // the first panel of the call's range
  size_t panel_stride;
};

// The activations of a tile: rows of g.x, or (Interleaved) the K chunk repacked k-major, element
// (r, i) at xi[i·R + r], so that every broadcast is a fixed offset from one pointer: R row
// pointers no longer fit the general registers once R passes about eight.
template <DType T, int R, int P, bool Interleaved>
void tile(const FloatGemm& g, ChunkWeights cw, const float* xi, int64_t panel0, int64_t panel,
          int64_t row, int64_t k0, int64_t k1) {
  constexpr int64_t kStep = kPanelRows * kElemBytes(T);  // bytes per k in a panel
  const uint8_t* wp[P];
  __mmask16 valid[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    wp[p] = cw.base + size_t(panel + p - panel0) * cw.panel_stride;
    const int64_t cols = std::min<int64_t>(kPanelRows, g.n - (panel + p) * kPanelRows);
    valid[p] = __mmask16((1u << cols) - 1);
  }
  const float* xr[R];
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    xr[r] = g.x + (row + r) * g.k + k0;
    float* y = g.y + (row + r) * g.y_stride + panel * kPanelRows;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
      acc[r][p] =
          k0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(valid[p], y + p * kPanelRows);
  }
  for (int64_t i = 0; i < k1 - k0; ++i) {
    __m512 w[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) w[p] = load_weights<T>(wp[p] + i * kStep);
    // The one-pass tile streams its weights from memory: each panel's run is fetched 32 k ahead.
    if constexpr (Interleaved)
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p)
        _mm_prefetch(reinterpret_cast<const char*>(wp[p] + (i + 32) * kStep), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(Interleaved ? xi[i * R + r] : xr[r][i]);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(x, w[p], acc[r][p]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* y = g.y + (row + r) * g.y_stride + panel * kPanelRows;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(y + p * kPanelRows, valid[p], acc[r][p]);
  }
}

// Panels [c0, c1) for rows row .. row+R-1 over K elements [k0, k1): P panels per tile (eight
// for a single row, whose accumulators alone would give too few independent FMA chains; fewer as
// R grows, so that R·P accumulators fit the registers), then the remainder in smaller tiles: a
// tile of one panel is bound by its activation broadcasts unless R is large.
template <DType T, int R, bool Interleaved = false>
void rows(const FloatGemm& g, ChunkWeights cw, const float* xi, int64_t c0, int64_t c1, int64_t row,
          int64_t k0, int64_t k1) {
  constexpr int P = R == 1 ? 8 : R <= 6 ? 4 : R <= 12 ? 2 : 1;
  int64_t p = c0;
  for (; p + P <= c1; p += P) tile<T, R, P, Interleaved>(g, cw, xi, c0, p, row, k0, k1);
  if (P > 2 && p + 2 <= c1) {
    tile<T, R, 2, Interleaved>(g, cw, xi, c0, p, row, k0, k1);
    p += 2;
  }
  for (; p < c1; ++p) tile<T, R, 1, Interleaved>(g, cw, xi, c0, p, row, k0, k1);
}

// Up to this many rows run as one row tile: each weight vector is read once per call, so a
// batched decode streams its weights from memory once instead of once per six-row tile (the
// later tiles found them in L2, but the first one waited on memory without computing).
constexpr int kSinglePassRows = int(kFloatSinglePassRows);

using RowsFn = void (*)(const FloatGemm&, ChunkWeights, const float*, int64_t, int64_t, int64_t,
                        int64_t, int64_t);

// rows<T, r, Interleaved> for r = 1 .. sizeof...(R): the tile for a run-time row count.
template <DType T, bool Interleaved, int... R>
constexpr std::array<RowsFn, sizeof...(R)> rows_by_count(std::integer_sequence<int, R...>) {
  return {rows<T, R + 1, Interleaved>...};
}

// xi: the K chunk's activations transposed (the tile's layout) when g.m <= kSinglePassRows.
template <DType T>
void row_tiles(const FloatGemm& g, ChunkWeights cw, const float* xi, int64_t c0, int64_t c1,
               int64_t k0, int64_t k1) {
  if (g.m <= kSinglePassRows) {
    static constexpr auto kOnePass =
        rows_by_count<T, true>(std::make_integer_sequence<int, kSinglePassRows>());
    return kOnePass[size_t(g.m - 1)](g, cw, xi, c0, c1, 0, k0, k1);
  }
  constexpr int kRows = 6;
  static constexpr auto kTiles = rows_by_count<T, false>(std::make_integer_sequence<int, kRows>());
  for (int64_t row = 0; row < g.m; row += kRows)
    kTiles[size_t(std::min<int64_t>(kRows, g.m - row) - 1)](g, cw, nullptr, c0, c1, row, k0, k1);
}

// Panels are taken in chunks of about this many bytes per K chunk, which stay in L2 while every
// row tile passes over them.
constexpr size_t kPanelChunkBytes = size_t(512) << 10;
// From this many rows, half-precision weights are widened to f32 once per group of kWidenPanels
// panels and K chunk, and every row tile reads the f32 copy from L1: the conversions otherwise
// share the FMA ports, once per tile.
constexpr int64_t kWidenMinRows = 32;
constexpr int64_t kWidenPanels = 4;

template <DType T>
void gemm(const FloatGemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = float_panel_bytes(T, g.k);
  const bool widen = T != DType::F32 && g.m >= kWidenMinRows;
  const int64_t chunk_panels =
      widen
          ? kWidenPanels
          : std::max<int64_t>(8, int64_t(kPanelChunkBytes / (kChunk * kPanelRows * kElemBytes(T))));
  alignas(64) float buffer[kWidenPanels * kChunk * kPanelRows];
  for (int64_t k0 = 0; k0 < g.k; k0 += kChunk) {
    const int64_t k1 = std::min(g.k, k0 + kChunk);
    const float* xi = g.m <= kSinglePassRows ? g.xt + k0 * g.m : nullptr;
    for (int64_t c0 = p0; c0 < p1; c0 += chunk_panels) {
      const int64_t c1 = std::min(p1, c0 + chunk_panels);
      const ChunkWeights direct{
          g.w + size_t(c0) * panel_bytes + size_t(k0) * kPanelRows * kElemBytes(T), panel_bytes};
      if (!widen) {
        row_tiles<T>(g, direct, xi, c0, c1, k0, k1);
        continue;
      }
      const size_t stride = size_t(k1 - k0) * kPanelRows;  // floats per widened panel chunk
      for (int64_t p = c0; p < c1; ++p) {
        const uint8_t* src = direct.base + size_t(p - c0) * panel_bytes;
        float* dst = buffer + size_t(p - c0) * stride;
        for (int64_t i = 0; i < k1 - k0; ++i)
          _mm512_store_ps(dst + i * kPanelRows,
                          load_weights<T>(src + i * kPanelRows * kElemBytes(T)));
      }
      row_tiles<DType::F32>(
          g, ChunkWeights{reinterpret_cast<const uint8_t*>(buffer), stride * sizeof(float)},
          nullptr, c0, c1, k0, k1);
    }
  }
}

constexpr FloatGemmFn kGemm =
    float_gemm_for_type<gemm<DType::F32>, gemm<DType::F16>, gemm<DType::BF16>>;

}  // namespace

FloatGemmFn avx512_float_gemm() {
  return kGemm;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
FloatGemmFn avx512_float_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
