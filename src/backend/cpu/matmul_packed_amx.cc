// AMX GEMM over packed weights (layout in packed_matmul.h), for batches: per tile of sixteen
// activation rows and one panel, each 32-element block is one TDPBSSD/TDPBSUD (16×16×32 MACs)
// into an int32 tile, stored and handed to block_update — the same per-block step as the VNNI
// kernel, so both give the same bits. The integer tile is exact; the scales force one store and
// sixteen vector updates per block, and that epilogue, not the tile unit, bounds this kernel
// (docs/benchmarks.md has the arithmetic). A block's epilogue runs while the next block's tile
// product does.
//
// Per call a thread converts each panel's codes once into signed bytes (Q4_0: u - 8, Q5_0:
// u - 16, Q8_0: u - 128) or unsigned ones (Q4_1, Q5_1) in a thread-local buffer, then every row
// tile reads it.
#include "backend/cpu/packed_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AMX_TILE__) && defined(__AMX_INT8__)

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/packed_block_avx512.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

// Tiles 0 and 1: int32 results (16 rows × 16 lanes); 2 and 3: activation codes (16 rows × 32
// bytes); 4 and 5: weight codes (8 quad rows × 64 bytes). Two of each so that one block's
// product runs while the previous block's epilogue does.
const AmxTileConfig kTileConfig = {1, 0, {}, {64, 64, 32, 32, 64, 64}, {16, 16, 16, 16, 8, 8}};

// One block's converted codes: 8 quad rows of 64 bytes.
constexpr int kTileBlockBytes = kPanelBlockCodes;

// Converts a panel's codes for the tile unit (see the file comment).
template <DType T>
void convert_panel(const uint8_t* panel, int64_t nb, uint8_t* out) {
  using F = PackedFormat<T>;
  for (int64_t b = 0; b < nb; ++b, panel += F::kBlockBytes, out += kTileBlockBytes) {
    if constexpr (F::kNibbles) {
      const __m512i fifth = fifth_bits<T>(panel);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        __m512i lo, hi;
        unpack_chunk<T>(panel, fifth, t, lo, hi);
        if constexpr (F::kOffsetShift != 0) {
          const __m512i offset = _mm512_set1_epi8(char(1 << F::kOffsetShift));
          lo = _mm512_sub_epi8(lo, offset);
          hi = _mm512_sub_epi8(hi, offset);
        }
        _mm512_store_si512(out + 64 * t, lo);
        _mm512_store_si512(out + 64 * (t + 4), hi);
      }
    } else {
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        _mm512_store_si512(out + 64 * q, _mm512_xor_si512(_mm512_loadu_si512(panel + 64 * q),
                                                          _mm512_set1_epi8(char(0x80))));
    }
  }
}

// The tile product for one block: Q4_1's and Q5_1's codes are unsigned, the others' signed. (GCC's
// tile intrinsics paste their tile numbers into the assembly text: literals only.)
#define KESTREL_TILE_PRODUCT(T, C, A, B) \
  do {                                   \
    if constexpr (packed_has_min(T)) {   \
      _tile_dpbsud(C, A, B);             \
    } else {                             \
      _tile_dpbssd(C, A, B);             \
    }                                    \
  } while (false)

template <DType T>
__attribute__((always_inline)) inline void epilogue(const int32_t* c, const float* ts,
                                                    const uint8_t* block, __m512 (&acc)[16]) {
  using F = PackedFormat<T>;
  const __m512 dw = panel_scales(block, F::kCodeBytes, 0);
  const __m512 mw = F::kMin ? panel_scales(block, F::kCodeBytes, 1) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < kPanelRows; ++r)
    acc[r] = block_update<F::kMin>(acc[r], _mm512_load_si512(c + 16 * r), ts[r], ts[kPanelRows + r],
                                   dw, mw);
}

// Sixteen rows (scale tile t) of one panel; `codes` the tile's first activation row, `tb` the
// panel's converted codes, `panel` its packed blocks (for the scales).
template <DType T>
void row_tile(const PackedGemm& g, int64_t t, const uint8_t* panel, const uint8_t* tb, float* y,
              int valid_cols) {
  using F = PackedFormat<T>;
  const int64_t nb = g.k / 32;
  const int8_t* a = g.x.codes + size_t(t) * kPanelRows * g.x.stride;
  const auto stride = int64_t(g.x.stride);
  alignas(64) int32_t c0[256], c1[256];
  __m512 acc[16];
#pragma GCC unroll 16
  for (int r = 0; r < kPanelRows; ++r) acc[r] = _mm512_setzero_ps();
  auto issue0 = [&](int64_t b) {
    _tile_zero(0);
    _tile_loadd(2, a + 32 * b, stride);
    _tile_loadd(4, tb + kTileBlockBytes * b, 64);
    KESTREL_TILE_PRODUCT(T, 0, 2, 4);
  };
  auto issue1 = [&](int64_t b) {
    _tile_zero(1);
    _tile_loadd(3, a + 32 * b, stride);
    _tile_loadd(5, tb + kTileBlockBytes * b, 64);
    KESTREL_TILE_PRODUCT(T, 1, 3, 5);
  };
  // Block b's results are stored, and its epilogue runs one block later: vector loads cannot
  // take data straight from a tile store, so reading them at once would wait for the store to
  // reach the cache.
  const auto update = [&](const int32_t* c, int64_t b) {
    epilogue<T>(c, g.x.tile_scales(t, b), panel + size_t(b) * F::kBlockBytes, acc);
  };
  for (int64_t b = 0; b < nb; b += 2) {
    issue0(b);
    _tile_stored(0, c0, 64);
    if (b > 0) update(c1, b - 1);
    if (b + 1 >= nb) break;
    issue1(b + 1);
    _tile_stored(1, c1, 64);
    update(c0, b);
  }
  update(nb % 2 == 1 ? c0 : c1, nb - 1);
  const int valid_rows = int(std::min<int64_t>(kPanelRows, g.m - t * kPanelRows));
  for (int r = 0; r < valid_rows; ++r) store_panel_row(y + r * g.y_stride, acc[r], valid_cols);
}

// Row tiles are taken in chunks of about this many bytes of activation codes, which stay in L2
// while the thread's panels pass over them.
constexpr size_t kRowChunkBytes = size_t(1) << 20;
// Panels are converted in chunks of about this many bytes, which stay in L2 while each row tile
// of the row chunk passes over them: a row tile's activation tiles then stay in L1 from one
// panel to the next. (With panels outside, every tile load of sixteen half-used activation lines
// came from L2 once the batch outgrew L1, and a 512-row batch ran 30 % slower than a 64-row one.)
constexpr size_t kPanelChunkBytes = size_t(384) << 10;

// A chunk of panels converted for the tile unit, kept by the thread's arena.
struct ConvertedPanels {
  std::vector<uint8_t> bytes;
};

template <DType T>
void gemm(const PackedGemm& g, int64_t p0, int64_t p1) {
  using F = PackedFormat<T>;
  const int64_t nb = g.k / 32;
  const size_t panel_bytes = size_t(nb) * F::kBlockBytes;
  const size_t converted_bytes = size_t(nb) * kTileBlockBytes;  // one panel, converted
  const int64_t chunk_panels =
      std::clamp<int64_t>(int64_t(kPanelChunkBytes / converted_bytes), 1, p1 - p0);
  ScratchArena own;
  std::vector<uint8_t>& buffer =
      (g.scratch != nullptr ? *g.scratch : own).get<ConvertedPanels>().bytes;
  uint8_t* tb = cache_aligned(buffer, size_t(chunk_panels) * converted_bytes);
  _tile_loadconfig(&kTileConfig);
  const int64_t tiles = packed_activation_rows(g.m) / kPanelRows;
  const int64_t chunk = std::max<int64_t>(1, int64_t(kRowChunkBytes / (kPanelRows * g.x.stride)));
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
    const int64_t t1 = std::min(tiles, t0 + chunk);
    for (int64_t c0 = p0; c0 < p1; c0 += chunk_panels) {
      const int64_t c1 = std::min(p1, c0 + chunk_panels);
      for (int64_t p = c0; p < c1; ++p)
        convert_panel<T>(g.w + size_t(p) * panel_bytes, nb, tb + size_t(p - c0) * converted_bytes);
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t p = c0; p < c1; ++p) {
          const int valid_cols = int(std::min<int64_t>(kPanelRows, g.n - p * kPanelRows));
          row_tile<T>(g, t, g.w + size_t(p) * panel_bytes, tb + size_t(p - c0) * converted_bytes,
                      g.y + t * kPanelRows * g.y_stride + p * kPanelRows, valid_cols);
        }
      }
    }
  }
  _tile_release();
}

constexpr PackedGemmFn kGemm =
    gemm_for_type<gemm<DType::Q4_0>, gemm<DType::Q4_1>, gemm<DType::Q5_0>, gemm<DType::Q5_1>,
                  gemm<DType::Q8_0>>;

bool amx_permitted() {
  return __builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") && amx_tile_state_granted();
}

}  // namespace

PackedGemmFn amx_packed_gemm() {
  static const bool ok = amx_permitted();
  return ok ? kGemm : nullptr;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
PackedGemmFn amx_packed_gemm() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
