#include "backend/cpu/bf16_tiles.h"

#include <cstring>

#include "base/status.h"

namespace kestrel::cpu {

bool bf16_tiles_supported() {
  return amx_bf16_gemm() != nullptr;
}

std::unique_ptr<uint8_t[]> pack_bf16_tiles(const Tensor& w) {
  KCHECK(w.dtype == DType::BF16 && w.shape.ndim == 2 && w.rows() > 0 && w.cols() > 0,
         "pack_bf16_tiles: {} [{}] is not a BF16 matrix", dtype_name(w.dtype), w.shape.str());
  const int64_t n = w.rows(), k = w.cols();
  const size_t panel_bytes = bf16_tile_panel_bytes(k);
  auto out = std::make_unique<uint8_t[]>(size_t(packed_panels(n)) * panel_bytes);  // zeroed
  for (int64_t r = 0; r < n; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(w.row(r));
    auto* panel = reinterpret_cast<uint16_t*>(out.get() + size_t(r / kPanelRows) * panel_bytes);
    const int64_t lane = r % kPanelRows;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t b = i / kBf16TileK, e = i % kBf16TileK;
      // Block b's 512 values; pair row e / 2, lane `lane`, half e % 2.
      panel[b * kPanelRows * kBf16TileK + (e / 2) * 2 * kPanelRows + 2 * lane + e % 2] = src[i];
    }
  }
  return out;
}

size_t bf16_activation_stride(int64_t k) {
  // Whole cache lines, an odd number of them: sixteen rows a power of two apart would share one
  // L1 set.
  const size_t lines = size_t(bf16_tile_blocks(k)) * kBf16TileK * 2 / 64;
  return (lines | 1) * 64;
}

}  // namespace kestrel::cpu
