// backend/cpu/kquant_panels.h — a packed copy of Q4_K, Q5_K and Q6_K weights for a panel GEMM,
// and the GEMM over it: the K-quants' counterpart of packed_matmul.h.
//
// Why: the row kernels of kquant_dot.h take eight GGUF rows as eight lanes, so every super-block
// costs each row a gather of its scales and a reduction of eight partial vectors, and decode of a
// K-quant file ran at half the bandwidth the 32-element formats reach with their panels. Here the
// rows of a panel sit side by side as in packed_matmul.h, lanes are output rows, and the integer
// sums need no reduction.
//
// Panels of kPanelRows (16) rows. Per super-block of 256 elements, in order:
//   - 8 units of 32 elements. A unit's codes: 4 nibble chunks of 64 bytes (chunk t: the low
//     nibbles are quad row t — elements 4t..4t+3 of the unit, bytes 4n..4n+3 for the panel's
//     row n — and the high nibbles quad row t + 4), then the higher bits: Q5_K one 64-byte plane
//     (bit t of byte j: quad row t; bit t + 4: quad row t + 4), Q6_K two (plane 0's bits 2t and
//     2t + 1 of byte j: the two high bits of quad row t; plane 1: of quad row t + 4).
//   - the scales, one byte per row: Q4_K/Q5_K 8 sub-block scales then 8 mins ([j][16 rows]),
//     Q6_K 16 signed sub-block scales (sub-blocks of 16: quad rows 0–3 and 4–7 of each unit);
//   - d of the 16 rows as f16, then for Q4_K/Q5_K dmin.
// Q6_K's copy is as large as the file; Q4_K's and Q5_K's 4 bytes per row and super-block larger
// (the scales unpacked from their 6-bit fields).
//
// Arithmetic: kquant_dot.h's, exactly — per super-block the exact integers c and m, then
// acc = fma(float(c), d_w·d_x, acc) and acc = fma(float(−m), dmin_w·d_x, acc) — so the GEMM gives
// the row kernels' bits at every batch size.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

#include "backend/cpu/packed_matmul.h"
#include "backend/cpu/thread_scratch.h"
#include "tensor/quant_formats.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

constexpr int kKUnits = 8;  // units of 32 elements per super-block

// Bytes of one unit's codes in a panel (nibble chunks and bit planes).
constexpr size_t kquant_unit_bytes(DType t) {
  return kPanelBlockCodes / 2 + (t == DType::Q6_K   ? 2
                                 : t == DType::Q5_K ? 1
                                                    : 0) *
                                    (kPanelBlockCodes / 8);
}
// Sub-block scales per super-block (Q6_K: 16; Q4_K, Q5_K: 8, each with a min).
constexpr int kquant_sub_blocks(DType t) {
  return t == DType::Q6_K ? 16 : 8;
}
constexpr bool kquant_has_min(DType t) {
  return t != DType::Q6_K;
}
// Offset, within a panel's super-block, of the scales, the mins and the d values.
constexpr size_t kquant_scales_offset(DType t) {
  return kKUnits * kquant_unit_bytes(t);
}
constexpr size_t kquant_mins_offset(DType t) {
  return kquant_scales_offset(t) + size_t(kquant_sub_blocks(t)) * kPanelRows;
}
constexpr size_t kquant_d_offset(DType t) {
  return kquant_mins_offset(t) + (kquant_has_min(t) ? size_t(8) * kPanelRows : 0);
}
// Bytes of one super-block of a panel.
constexpr size_t kquant_block_bytes(DType t) {
  return kquant_d_offset(t) + (kquant_has_min(t) ? 2 : 1) * kPanelRows * sizeof(uint16_t);
}

// Whether pack_kquant_panels handles this tensor: a 2-D Q4_K, Q5_K or Q6_K weight.
bool kquant_packable(const Tensor& w);
// The packed copy of `w`: packed_panels(N) panels one after the other, a last partial panel
// padded with zero rows.
std::unique_ptr<uint8_t[]> pack_kquant_panels(const Tensor& w);

// One GEMM over a packed copy: y[r * y_stride + n] = Σ_k w[n][k]·x[r][k] for r < m, n < n_rows,
// x as Q8_K rows (BlockQ8_K per 256 elements) x_stride bytes apart.
struct KQuantGemm {
  DType type;
  const uint8_t* w;
  int64_t n, k;
  const uint8_t* x;
  size_t x_stride;
  int64_t m;
  float* y;
  int64_t y_stride;
  // The running thread's arena (thread_scratch.h); null: buffers of the call's own.
  ScratchArena* scratch = nullptr;
};
// Computes every row of y for the panels [p0, p1).
using KQuantGemmFn = void (*)(const KQuantGemm& g, int64_t p0, int64_t p1);

// Batches of kKConvertRows rows or more first convert each panel's codes to whole bytes
// (unsigned, before Q6_K's offset), kKUnitCodeBytes per unit: quad row q of the unit at byte 64q,
// in the panel's lane layout. Then an activation row's step is one multiply-add instruction per
// quad row, where unpacking nibbles and bit planes would cost more than the products.
constexpr int kKUnitCodeBytes = 8 * 64;
constexpr int64_t kKConvertRows = 8;
// Converts one panel (nb super-blocks of a t copy) into out (nb · kKUnits · kKUnitCodeBytes
// bytes, 32-byte aligned). AVX2 code.
void convert_kquant_panel(DType t, const uint8_t* panel, int64_t nb, uint8_t* out);
// What the GEMMs do with a batch: for each chunk [c0, c1) of `chunk` panels of [p0, p1), converts
// the chunk into the thread's scratch (g.scratch) and calls tiles(c0, c1, conv, converted), conv
// holding panel p's codes at (p - c0) · converted.
void for_converted_chunks(const KQuantGemm& g, int64_t p0, int64_t p1, int64_t chunk,
                          const std::function<void(int64_t c0, int64_t c1, const uint8_t* conv,
                                                   size_t converted)>& tiles);

// The activation side of the GEMMs' last integer step for one Q8_K block, as int16 pairs (low
// half first) in int32s: Q4_K/Q5_K (`mins`) 4 pairs of the 32-element sums (Y_2p, Y_2p+1) with
// Y_j = bsums_2j + bsums_2j+1, against the rows' mins; Q6_K 8 pairs (bsums_2p, bsums_2p+1),
// against its sub-block scales. Exact: |Y_j| <= 32 · 127. Static: every kernel file keeps its own
// copy, compiled with its own flags, and inlines it (once per activation row and super-block).
static inline void kquant_activation_pairs(const BlockQ8_K& y, bool mins, int32_t* pairs) {
  if (mins) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(pairs),
        _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8))));
  } else {
    std::memcpy(pairs, y.bsums, 8 * sizeof(int32_t));
  }
}

// The AVX2 GEMM (two 8-lane halves per panel; with vpdpbusd at the "avxvnni" level) and the
// AVX-512 VNNI one (a panel per vector); nullptr where this build lacks the instructions. All
// give the same bits.
KQuantGemmFn avx2_kquant_gemm();
KQuantGemmFn avx512_kquant_gemm();
// The AVX-VNNI variant the AVX2 GEMM runs at the "avxvnni" level; nullptr where this CPU or
// build lacks AVX-VNNI.
KQuantGemmFn avxvnni_kquant_gemm();

}  // namespace kestrel::cpu
