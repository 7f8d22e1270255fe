// backend/cpu/packed_block_avx512.h — what the VNNI and AMX kernels over packed weights share:
// the per-format traits and the one per-block step that turns integer sums into outputs
// (packed_matmul.h, "Arithmetic"). Both kernels call block_update, so an output's rounding is
// the same whichever of them computed it.
//
// Include only from files compiled with the AVX-512 flags; everything here is static or inline
// in an unnamed namespace, so each file keeps its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/packed_matmul.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {
namespace {

template <DType T>
struct PackedFormat {
  static constexpr bool kNibbles = T != DType::Q8_0;
  static constexpr bool kMin = T == DType::Q4_1;  // stores m (else m = -8d or -128d)
  // log2 of the code offset VNNI's unsigned codes carry (u - 8, u - 128); 0 for Q4_1.
  static constexpr int kOffsetShift = T == DType::Q4_0 ? 3 : T == DType::Q8_0 ? 7 : 0;
  static constexpr int kCodeBytes = kNibbles ? kPanelBlockCodes / 2 : kPanelBlockCodes;
  static constexpr int kBlockBytes = kCodeBytes + (kMin ? 2 : 1) * kPanelRows * 2;
};

// The sixteen rows' f16 d (or m, at kPanelRows further on) of a panel block.
__attribute__((always_inline)) inline __m512 panel_scales(const uint8_t* block, int code_bytes,
                                                          int which) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(block + code_bytes + which * kPanelRows * 2)));
}

// acc += one block's contribution for one activation row: c the signed-code integer sums of the
// panel's sixteen outputs, dx and s the row's d_x and s_x, dw and mw the panel's scales.
template <bool kMin>
__attribute__((always_inline)) inline __m512 block_update(__m512 acc, __m512i c, float dx, float s,
                                                          __m512 dw, __m512 mw) {
  acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(dx)), dw, acc);
  if constexpr (kMin) acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(s), acc);
  return acc;
}

// Stores a panel's sixteen outputs of one row; only the first `valid` are real rows of W.
__attribute__((always_inline)) inline void store_panel_row(float* y, __m512 v, int valid) {
  if (valid >= kPanelRows) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, __mmask16((1u << valid) - 1), v);
  }
}

}  // namespace
}  // namespace kestrel::cpu
