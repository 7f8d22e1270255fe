// backend/cpu/packed_matmul.h — a second, machine-friendly copy of 32-element-block weights
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for the AVX2, AVX-512 VNNI and AMX kernels, and the activation
// format they read.
//
// Why: in GGUF's layout every 32 weights carry their own f16 scales, and a row's codes sit in
// one line, which suits one dot product at a time. A GEMM wants the other orientation: sixteen
// output rows' codes side by side, so one 64-byte vector holds four consecutive elements of each
// of sixteen rows. That is the B operand of both VNNI with a broadcast activation (sixteen outputs
// per instruction, one per 32-bit lane) and AMX's TDPB*D, so one copy serves every batch size:
// decode streams it with VNNI and prefill feeds it to the tile unit.
//
// Weights become unsigned codes u with w = d·u + m per block: Q4_1 and Q5_1 as they are; Q4_0
// with m = -8d, Q5_0 with m = -16d; Q8_0 as u = q + 128 with m = -128d (so only Q4_1 and Q5_1
// store m). Scales stay f16, as in the file, and Q5's fifth bits stay bits: decode reads as many
// bytes per token as the original.
//
// Panels: output rows go in panels of kPanelRows. For each block b of K (32 elements), in order,
// a panel holds the block's codes as 8 quad rows of 64 bytes (quad row q: bytes 4n..4n+3 are
// elements 4q..4q+3 of the panel's row n), then the sixteen rows' d as f16, then for Q4_1 and
// Q5_1 their m as f16. Q4 and Q5 keep the low four bits as nibbles in 4 chunks of 64 bytes: chunk
// t's low nibbles are quad row t, its high nibbles quad row t + 4. Q5 follows them with a 64-byte
// plane of fifth bits: bit q of byte j is the fifth bit of the code at byte j of quad row q. A
// last, partial panel is padded with zero rows.
//
// Arithmetic, the same in every kernel so that no output depends on the batch or the thread
// split: per block, the exact integer c = Σ w_code·x_code (Q4_0, Q5_0 and Q8_0 counted with
// signed codes u - 8, u - 16 and u - 128), then acc = fma(float(c)·d_x, d_w, acc) and for Q4_1
// and Q5_1 acc = fma(m_w, s_x, acc), blocks in order from a zero acc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/thread_scratch.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

constexpr int kPanelRows = 16;
constexpr int kPanelBlockCodes = 32 * kPanelRows;  // codes of one block of a panel

// Whether pack_weight handles this tensor: a 2-D Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 weight.
bool packable(const Tensor& w);

inline int64_t packed_panels(int64_t n) {
  return (n + kPanelRows - 1) / kPanelRows;
}
// Bytes of the codes alone (Q5: with the plane of fifth bits) in one block of a panel.
constexpr size_t packed_block_code_bytes(DType t) {
  switch (t) {
    case DType::Q8_0:
      return kPanelBlockCodes;
    case DType::Q5_0:
    case DType::Q5_1:
      return kPanelBlockCodes / 2 + kPanelBlockCodes / 8;  // nibbles, then the fifth bits
    default:
      return kPanelBlockCodes / 2;
  }
}
// Whether a format stores m per block (else m is a fixed multiple of d).
constexpr bool packed_has_min(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_1;
}
// Bytes of one block of a panel: codes, then d (and m) of its sixteen rows.
constexpr size_t packed_block_bytes(DType t) {
  return packed_block_code_bytes(t) + (packed_has_min(t) ? 2 : 1) * kPanelRows * sizeof(uint16_t);
}
inline size_t packed_panel_bytes(DType t, int64_t k) {
  return size_t(k / 32) * packed_block_bytes(t);
}

// Where element e (0..31) of the panel's row n sits among a block's codes: byte `byte` of the
// code bytes, and for nibbles whether in the high half.
struct CodeSlot {
  int byte;
  bool high;
};
inline CodeSlot packed_code_slot(bool nibbles, int n, int e) {
  const int quad_row = e / 4, byte = 4 * n + e % 4;
  if (!nibbles) return {quad_row * 64 + byte, false};
  return {(quad_row % 4) * 64 + byte, quad_row >= 4};
}

// Q5: where the fifth bit of element e of the panel's row n sits in the block's plane (which
// starts kPanelBlockCodes / 2 bytes into the block): bit `bit` of byte `byte`.
struct HighBitSlot {
  int byte;
  int bit;
};
inline HighBitSlot packed_high_bit_slot(int n, int e) {
  return {4 * n + e % 4, e / 4};
}

// The packed copy of `w` (which must be packable): packed_panels(N) panels one after the other.
std::unique_ptr<uint8_t[]> pack_weight(const Tensor& w);

// Packed activations for M rows of K: int8 codes row by row (`stride` bytes apart, rows padded
// to a multiple of kPanelRows with zeros for the tile unit), and per tile of kPanelRows rows and
// per block b, the rows' scales in 64-byte vectors: d_x (f32), s_x = d_x·Σq (f32) and Σq (i32).
// Codes and d_x are quantize_row_q8_0's (d rounded to f16).
struct PackedActivations {
  const int8_t* codes = nullptr;
  size_t stride = 0;
  const float* scales = nullptr;
  int64_t blocks = 0;  // K / 32
  // The three vectors of row tile t, block b: d_x at [0, 16), s_x at [16, 32), Σq at [32, 48).
  const float* tile_scales(int64_t t, int64_t b) const {
    return scales + (t * blocks + b) * 3 * kPanelRows;
  }
};
inline int64_t packed_activation_rows(int64_t m) {
  return (m + kPanelRows - 1) / kPanelRows * kPanelRows;
}
// Bytes of the scale area for M rows of K.
size_t packed_activation_scale_bytes(int64_t m, int64_t k);

// One block of 32 activations as Q8_0 codes (round(x / d), d = max|x| / 127, clamped to ±127),
// with d rounded to f16 (returned as f32) and the codes' exact sum: what every int8 kernel over
// 32-element-block weights reads (q8_block_dot.h).
struct Q8BlockScale {
  float d;
  int32_t sum;
};
Q8BlockScale quantize_q8_block(const float* x, int8_t* codes);

// Quantizes row `row` of the activations (x: its K floats) into codes (its code row) and the
// scale area.
void quantize_row_packed(const float* x, int8_t* codes, float* scales, int64_t row, int64_t k);

// One packed GEMM: y[r * y_stride + n] = Σ_k w[n][k]·x[r][k] for r < m, n < n_rows.
struct PackedGemm {
  DType type;
  const uint8_t* w;  // the packed copy
  int64_t n, k;
  PackedActivations x;
  int64_t m;
  float* y;
  int64_t y_stride;
  // The running thread's arena (thread_scratch.h); null: buffers of the call's own.
  ScratchArena* scratch = nullptr;
};
// Computes every row of y for the panels [p0, p1).
using PackedGemmFn = void (*)(const PackedGemm& g, int64_t p0, int64_t p1);

// A PackedGemmFn that runs the kernel for g's weight type: the one switch every GEMM file needs.
// The kernels have internal linkage in their own files, so each instantiation stays there too.
template <PackedGemmFn kQ4_0, PackedGemmFn kQ4_1, PackedGemmFn kQ5_0, PackedGemmFn kQ5_1,
          PackedGemmFn kQ8_0>
void gemm_for_type(const PackedGemm& g, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::Q4_0:
      return kQ4_0(g, p0, p1);
    case DType::Q4_1:
      return kQ4_1(g, p0, p1);
    case DType::Q5_0:
      return kQ5_0(g, p0, p1);
    case DType::Q5_1:
      return kQ5_1(g, p0, p1);
    default:
      return kQ8_0(g, p0, p1);
  }
}

// nullptr where this build or CPU lacks the instructions (AMX also needs the kernel's consent).
PackedGemmFn avx512_packed_gemm();
PackedGemmFn amx_packed_gemm();
// The same GEMM on AVX2 (two 8-lane halves per panel; packed_gemm_avx2.h): the same bits. It runs
// the AVX-VNNI variant when that level is selected (cpu_isa.h).
PackedGemmFn avx2_packed_gemm();
// The AVX-VNNI variant; nullptr where this CPU or build lacks AVX-VNNI.
PackedGemmFn avxvnni_packed_gemm();

}  // namespace kestrel::cpu
