// backend/cpu/packed_matmul.h — a second, machine-friendly copy of 32-element-block weights
// (Q4_0, Q4_1, Q8_0) for the AVX-512 VNNI kernels, and the activation format they read.
//
// Why: in GGUF's layout every 32 weights carry their own f16 scales, so a dot product spends
// most of its instructions converting and broadcasting scales rather than multiplying. Here the
// codes of a row are contiguous and its scales are arrays of their own, so one 64-byte load feeds
// one VNNI instruction and sixteen blocks' scales arrive in one load and one conversion.
//
// Weights become unsigned codes u with w = d·u + m per block: Q4_1 as is; Q4_0 with m = -8d;
// Q8_0 as u = q + 128 with m = -128d (so only Q4_1 stores m). Scales stay f16, as in the file:
// decode reads as many bytes per token as the original. Then Σ w·x = Σ_b d_b·d_x,b·(Σ u·q_x) + Σ_b
// m_b·s_b, where activations are int8 codes q_x with scale d_x and s_b = d_x,b·Σ q_x over the block
// — one activation format for all three weight types.
//
// Element order within a pair of blocks (b0, b1), shared by weights and activations:
//   b0[0..15], b1[0..15], b0[16..31], b1[16..31]
// which is the order in which the low and then high nibbles of b0.qs ‖ b1.qs come out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/matmul_kernels.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// Whether pack_weight handles this tensor: Q4_0, Q4_1 or Q8_0 with K a multiple of 64.
bool packable(const Tensor& w);

// Packed row of a [N, K] weight: codes (32 bytes per block pair for Q4_x, 64 for Q8_0), then
// d[K/32] as f16, then for Q4_1 m[K/32] as f16.
size_t packed_weight_row_bytes(DType t, int64_t k);

// The packed copy of `w` (which must be packable), N rows of packed_weight_row_bytes.
std::unique_ptr<uint8_t[]> pack_weight(const Tensor& w);

// Packed activation row of K elements: per block pair, its 64 int8 codes in pair order and then
// sixteen f32 lanes of d_x (lane i belongs to the block of bytes 4i..4i+3); then s[K/32] f32.
// Codes and scales of a pair sit together so a kernel needs one pointer per row.
constexpr int64_t kPackedActivationPairBytes = 64 + 16 * sizeof(float);
size_t packed_activation_row_bytes(int64_t k);

// Quantizes one row as quantize_row_q8_0 does (same codes, d rounded to f16) into the packed
// activation format; s is exact (d_x times the integer code sum).
void quantize_row_packed(const float* x, uint8_t* dst, int64_t k);

// The kernels reading these rows are PackedKernels (matmul_kernels.h).

}  // namespace kestrel::cpu
