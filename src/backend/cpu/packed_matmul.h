// backend/cpu/packed_matmul.h — a second, machine-friendly copy of 32-element-block weights
// (Q4_0, Q4_1, Q8_0) for the AVX-512 VNNI kernels, and the activation format they read.
//
// Why: in GGUF's layout every 32 weights carry their own f16 scales, so a dot product spends
// most of its instructions converting and applying scales rather than multiplying. Here a row's
// blocks form groups of up to sixteen whose codes are interleaved so that each 32-bit lane of a
// VNNI accumulator collects products of one block only: a group of sixteen blocks runs eight
// VNNI instructions into one integer vector and applies all sixteen blocks' scales with one
// conversion, one multiply and one FMA.
//
// Weights become unsigned codes u with w = d·u + m per block: Q4_1 as is; Q4_0 with m = -8d;
// Q8_0 as u = q + 128 with m = -128d (so only Q4_1 stores m). Scales stay f16, as in the file:
// decode reads as many bytes per token as the original. Then Σ w·x = Σ_b d_b·d_x,b·(Σ u·q_x) + Σ_b
// m_b·s_b, where activations are int8 codes q_x with scale d_x and s_b = d_x,b·Σ q_x over the block
// — one activation format for all three weight types.
//
// Groups: the row's K/32 blocks (an even number) are cut greedily into groups of G = 16, 8, 4 or
// 2 consecutive blocks. A group has S = G/2 steps of 64 codes; block b of the group owns the
// L = 16/G lanes b·L .. b·L+L-1 of every step (four bytes per lane), so element e of block b sits
// in step e / (4L), lane b·L + (e/4) % L, byte e % 4 — at code offset packed_code_offset(G, b, e).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/matmul_kernels.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// Size of the group starting at block `first` of a row of nb blocks (16, 8, 4 or 2).
inline int packed_group_blocks(int64_t nb, int64_t first) {
  const int64_t left = nb - first;
  return left >= 16 ? 16 : left >= 8 ? 8 : left >= 4 ? 4 : 2;
}

// Offset of element e of the group's block b among the group's 32·G codes.
inline int packed_code_offset(int g, int b, int e) {
  const int lanes = 16 / g;
  return (e / (4 * lanes)) * 64 + (b * lanes + (e / 4) % lanes) * 4 + e % 4;
}

// Whether pack_weight handles this tensor: Q4_0, Q4_1 or Q8_0 with K a multiple of 64.
bool packable(const Tensor& w);

// Packed row of a [N, K] weight: the groups' codes one after the other (Q8_0: one byte per code;
// Q4_x: 16·G bytes per group, nibbles as in packed_nibble_slot), then d[K/32] as f16, then for
// Q4_1 m[K/32] as f16.
size_t packed_weight_row_bytes(DType t, int64_t k);

// Where a Q4_x group keeps code offset `o` (0 .. 32·G-1): byte `byte` of the group's 16·G bytes,
// high nibble or low. Steps are paired: 64 bytes hold step 2t in their low nibbles and step
// 2t+1 in their high ones; a group of one step (G = 2) keeps codes 0..31 low and 32..63 high.
struct NibbleSlot {
  int byte;
  bool high;
};
inline NibbleSlot packed_nibble_slot(int g, int o) {
  if (g == 2) return {o % 32, o >= 32};
  const int step = o / 64;
  return {(step / 2) * 64 + o % 64, step % 2 == 1};
}

// The packed copy of `w` (which must be packable), N rows of packed_weight_row_bytes.
std::unique_ptr<uint8_t[]> pack_weight(const Tensor& w);

// Packed activation row of K elements: per group, its 32·G int8 codes (packed_code_offset) and
// then sixteen f32 lanes of d_x (lane i holds the scale of the block owning lane i); then
// s[K/32] f32. Codes and scales of a group sit together so a kernel needs one pointer per row.
size_t packed_activation_group_bytes(int g);
size_t packed_activation_row_bytes(int64_t k);

// Quantizes one row as quantize_row_q8_0 does (same codes, d rounded to f16) into the packed
// activation format; s is exact (d_x times the integer code sum).
void quantize_row_packed(const float* x, uint8_t* dst, int64_t k);

// The kernels reading these rows are PackedKernels (matmul_kernels.h).

}  // namespace kestrel::cpu
