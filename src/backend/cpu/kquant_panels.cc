#include "backend/cpu/kquant_panels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/kquant_dot.h"
#include "base/status.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {

bool kquant_packable(const Tensor& w) {
  const bool type_ok = w.dtype == DType::Q4_K || w.dtype == DType::Q5_K || w.dtype == DType::Q6_K;
  return type_ok && w.shape.ndim == 2 && w.cols() % QK_K == 0 && w.cols() > 0 && w.rows() > 0;
}

std::unique_ptr<uint8_t[]> pack_kquant_panels(const Tensor& w) {
  KCHECK(kquant_packable(w), "pack_kquant_panels: {} [{}] is not packable", dtype_name(w.dtype),
         w.shape.str());
  const DType t = w.dtype;
  const int64_t n = w.rows(), nb = w.cols() / QK_K;
  const size_t block_bytes = kquant_block_bytes(t), unit_bytes = kquant_unit_bytes(t);
  const size_t panel_bytes = size_t(nb) * block_bytes;
  const size_t gguf_block = dtype_bytes(t, QK_K);
  // Zero-filled: padding rows have codes and scales 0, so they add nothing.
  auto out = std::make_unique<uint8_t[]>(size_t(packed_panels(n)) * panel_bytes);
  KQuantBlockCodes dec;
  for (int64_t r = 0; r < n; ++r) {
    const int pr = int(r % kPanelRows);
    uint8_t* panel = out.get() + size_t(r / kPanelRows) * panel_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      decode_kquant_block(t, w.row(r) + size_t(b) * gguf_block, dec);
      uint8_t* block = panel + size_t(b) * block_bytes;
      for (int u = 0; u < kKUnits; ++u) {
        uint8_t* unit = block + size_t(u) * unit_bytes;
        uint8_t* plane = unit + kPanelBlockCodes / 2;
        for (int e = 0; e < 32; ++e) {
          const int code = dec.u[32 * u + e];
          const int quad = e / 4, byte = 4 * pr + e % 4;
          unit[64 * (quad % 4) + byte] |= uint8_t((code & 0xF) << (quad >= 4 ? 4 : 0));
          if (t == DType::Q5_K) plane[byte] |= uint8_t(((code >> 4) & 1) << quad);
          if (t == DType::Q6_K)
            plane[64 * (quad / 4) + byte] |= uint8_t(((code >> 4) & 3) << (2 * (quad % 4)));
        }
      }
      uint8_t* scales = block + kquant_scales_offset(t);
      for (int j = 0; j < kquant_sub_blocks(t); ++j)
        scales[j * kPanelRows + pr] = uint8_t(dec.sc[j]);
      const uint8_t* src = w.row(r) + size_t(b) * gguf_block;
      auto* d = reinterpret_cast<uint16_t*>(block + kquant_d_offset(t));
      if (kquant_has_min(t)) {
        uint8_t* mins = block + kquant_mins_offset(t);
        for (int j = 0; j < 8; ++j) mins[j * kPanelRows + pr] = uint8_t(dec.mn[j]);
        // Q4_K and Q5_K both begin with d, dmin.
        std::memcpy(&d[pr], src, sizeof(uint16_t));
        std::memcpy(&d[kPanelRows + pr], src + sizeof(uint16_t), sizeof(uint16_t));
      } else {
        std::memcpy(&d[pr], src + offsetof(BlockQ6_K, d), sizeof(uint16_t));
      }
    }
  }
  return out;
}

namespace {

// The converted chunk of panels, kept by the thread's arena.
struct ConvertedKPanels {
  std::vector<uint8_t> bytes;
};

}  // namespace

void for_converted_chunks(const KQuantGemm& g, int64_t p0, int64_t p1, int64_t chunk,
                          const std::function<void(int64_t c0, int64_t c1, const uint8_t* conv,
                                                   size_t converted)>& tiles) {
  const int64_t nb = g.k / QK_K;
  const size_t panel_bytes = size_t(nb) * kquant_block_bytes(g.type);
  const size_t converted = size_t(nb) * kKUnits * kKUnitCodeBytes;  // one panel
  ScratchArena own;
  std::vector<uint8_t>& buffer =
      (g.scratch != nullptr ? *g.scratch : own).get<ConvertedKPanels>().bytes;
  uint8_t* conv = cache_aligned(buffer, size_t(std::min(chunk, p1 - p0)) * converted);
  for (int64_t c0 = p0; c0 < p1; c0 += chunk) {
    const int64_t c1 = std::min(p1, c0 + chunk);
    for (int64_t p = c0; p < c1; ++p)
      convert_kquant_panel(g.type, g.w + size_t(p) * panel_bytes, nb,
                           conv + size_t(p - c0) * converted);
    tiles(c0, c1, conv, converted);
  }
}

}  // namespace kestrel::cpu
