// AVX-512 VNNI GEMM over packed weights (layout in packed_matmul.h): a register tile of R
// activation rows × P panels (16·P outputs per row). Each quad row of a panel block is one
// weight vector; four activation codes broadcast to every lane meet it in one _mm512_dpbusd_epi32,
// giving sixteen outputs' partial sums at once. After each block, block_update applies the
// scales. This is the kernel for decode (one row streams every panel once) and the fallback for
// batches where AMX is absent.
#include "backend/cpu/packed_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/packed_block_avx512.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

constexpr int kPrefetchBlocks = 8;

__attribute__((always_inline)) inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

template <DType T, int R, int P>
void tile(const PackedGemm& g, int64_t panel, int64_t row) {
  using F = PackedFormat<T>;
  const int64_t nb = g.k / 32;
  const size_t panel_bytes = size_t(nb) * F::kBlockBytes;
  const uint8_t* wp[P];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) wp[p] = g.w + size_t(panel + p) * panel_bytes;
  const int8_t* xr[R];
  __m512 acc[R][P];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    xr[r] = g.x.codes + size_t(row + r) * g.x.stride;
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  // R <= 4 rows starting at a multiple of 4 lie in one tile of the scale area.
  const int64_t scale_tile = row / kPanelRows;
  const int lane = int(row % kPanelRows);
  for (int64_t b = 0; b < nb; ++b) {
    // Decode streams each panel once from memory: the block kPrefetchBlocks ahead is asked for
    // (matmul_packed_avx2.cc).
    if constexpr (R == 1)
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p)
        for (int off = 0; off < F::kBlockBytes; off += 64)
          _mm_prefetch(
              reinterpret_cast<const char*>(wp[p] + kPrefetchBlocks * F::kBlockBytes + off),
              _MM_HINT_T0);
    __m512i c[R][P];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) c[r][p] = _mm512_setzero_si512();
    if constexpr (F::kNibbles) {
      __m512i fifth[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) fifth[p] = fifth_bits<T>(wp[p]);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        __m512i lo[P], hi[P];
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) unpack_chunk<T>(wp[p], fifth[p], t, lo[p], hi[p]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i a0 = broadcast4(xr[r] + 4 * t), a1 = broadcast4(xr[r] + 4 * (t + 4));
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p) {
            c[r][p] = _mm512_dpbusd_epi32(c[r][p], lo[p], a0);
            c[r][p] = _mm512_dpbusd_epi32(c[r][p], hi[p], a1);
          }
        }
      }
    } else {
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        __m512i w[P];
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_si512(wp[p] + 64 * q);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i a = broadcast4(xr[r] + 4 * q);
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p) c[r][p] = _mm512_dpbusd_epi32(c[r][p], w[p], a);
        }
      }
    }
    __m512 dw[P], mw[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      dw[p] = panel_scales(wp[p], F::kCodeBytes, 0);
      mw[p] = F::kMin ? panel_scales(wp[p], F::kCodeBytes, 1) : _mm512_setzero_ps();
      wp[p] += F::kBlockBytes;
    }
    const float* ts = g.x.tile_scales(scale_tile, b);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float dx = ts[lane + r], s = ts[kPanelRows + lane + r];
      int32_t qsum;
      std::memcpy(&qsum, ts + 2 * kPanelRows + lane + r, sizeof(qsum));
      // Unsigned codes u = code + 2^shift: subtract 2^shift·Σq to get the signed-code sums.
      const __m512i offset = _mm512_set1_epi32(qsum << F::kOffsetShift);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const __m512i cs = F::kOffsetShift != 0 ? _mm512_sub_epi32(c[r][p], offset) : c[r][p];
        acc[r][p] = block_update<F::kMin>(acc[r][p], cs, dx, s, dw[p], mw[p]);
      }
      xr[r] += 32;
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const int valid = int(std::min<int64_t>(kPanelRows, g.n - (panel + p) * kPanelRows));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      store_panel_row(g.y + (row + r) * g.y_stride + (panel + p) * kPanelRows, acc[r][p], valid);
  }
}

// Panels [p0, p1) for rows row .. row+R-1: P panels per tile (more at one or two rows, where
// the rows alone give too few independent VNNI chains), the last few one at a time.
template <DType T, int R>
void rows(const PackedGemm& g, int64_t p0, int64_t p1, int64_t row) {
  constexpr int P = R <= 2 ? 4 : 2;
  int64_t p = p0;
  for (; p + P <= p1; p += P) tile<T, R, P>(g, p, row);
  for (; p < p1; ++p) tile<T, R, 1>(g, p, row);
}

// Panels are taken in chunks of about this many bytes, which stay in L2 while every row tile
// passes over them.
constexpr size_t kPanelChunkBytes = size_t(256) << 10;

template <DType T>
void gemm(const PackedGemm& g, int64_t p0, int64_t p1) {
  const size_t panel_bytes = packed_panel_bytes(T, g.k);
  const int64_t chunk = std::max<int64_t>(4, int64_t(kPanelChunkBytes / panel_bytes));
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    for (int64_t row = 0; row < g.m; row += 4) {
      switch (std::min<int64_t>(4, g.m - row)) {
        case 1:
          rows<T, 1>(g, c0, c1, row);
          break;
        case 2:
          rows<T, 2>(g, c0, c1, row);
          break;
        case 3:
          rows<T, 3>(g, c0, c1, row);
          break;
        default:
          rows<T, 4>(g, c0, c1, row);
      }
    }
  }
}

constexpr PackedGemmFn kGemm =
    gemm_for_type<gemm<DType::Q4_0>, gemm<DType::Q4_1>, gemm<DType::Q5_0>, gemm<DType::Q5_1>,
                  gemm<DType::Q8_0>>;

}  // namespace

PackedGemmFn avx512_packed_gemm() {
  return kGemm;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
PackedGemmFn avx512_packed_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
