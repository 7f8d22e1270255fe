// tensor/quant_kscales.h — the 6-bit sub-block scales and mins of Q4_K / Q5_K blocks.
#pragma once

#include <cstdint>

namespace kestrel {

// Unpacks scales[12] into sc[8] and mn[8] (models.md §8.5, "K-quant 6-bit scale packing").
// Internal linkage on purpose: *_avx512.cc files include this header too, and an out-of-line
// copy compiled with AVX-512 flags must never be the one the linker keeps for other callers.
static inline void unpack_k_scales(const uint8_t* scales, uint8_t* sc, uint8_t* mn) {
  for (int k = 0; k < 4; ++k) {
    sc[k] = scales[k] & 63;
    mn[k] = scales[k + 4] & 63;
  }
  for (int k = 4; k < 8; ++k) {
    sc[k] = uint8_t((scales[k + 4] & 0xF) | ((scales[k - 4] >> 6) << 4));
    mn[k] = uint8_t((scales[k + 4] >> 4) | ((scales[k] >> 6) << 4));
  }
}

}  // namespace kestrel
