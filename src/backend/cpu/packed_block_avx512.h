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
  static constexpr bool kFifthBit = T == DType::Q5_0 || T == DType::Q5_1;
  static constexpr bool kMin = packed_has_min(T);  // stores m (else m = -8d, -16d or -128d)
  // log2 of the code offset VNNI's unsigned codes carry (u - 8, u - 16, u - 128); 0 with a min.
  static constexpr int kOffsetShift = T == DType::Q4_0   ? 3
                                      : T == DType::Q5_0 ? 4
                                      : T == DType::Q8_0 ? 7
                                                         : 0;
  static constexpr int kCodeBytes = int(packed_block_code_bytes(T));
  static constexpr int kBlockBytes = int(packed_block_bytes(T));
};

// Chunk t (0..3) of a nibble block as two vectors of unsigned codes, quad rows t and t + 4; for
// Q5 with the fifth bits from the block's plane (`fifth`, loaded once per block).
template <DType T>
__attribute__((always_inline)) inline void unpack_chunk(const uint8_t* block, __m512i fifth, int t,
                                                        __m512i& lo, __m512i& hi) {
  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i v = _mm512_loadu_si512(block + 64 * t);
  lo = _mm512_and_si512(v, low4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  if constexpr (PackedFormat<T>::kFifthBit) {
    // Bits t and t + 4 of the plane's bytes moved to bit 4 (no bit of the byte's neighbour
    // reaches bit 4 in a 16-bit shift by at most four), then lo | (shifted & 0x10).
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    lo = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(fifth, 4 - t), bit4, 0xF8);
    hi = _mm512_ternarylogic_epi32(hi, _mm512_srli_epi16(fifth, t), bit4, 0xF8);
  }
}

// The block's plane of fifth bits (Q5), else zero.
template <DType T>
__attribute__((always_inline)) inline __m512i fifth_bits(const uint8_t* block) {
  if constexpr (PackedFormat<T>::kFifthBit) return _mm512_loadu_si512(block + kPanelBlockCodes / 2);
  return _mm512_setzero_si512();
}

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
