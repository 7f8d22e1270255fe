// backend/cpu/kquant_dot.h — Q4_K, Q5_K and Q6_K weights against Q8_K activations, computed the
// one way every ISA follows, so a K-quant model answers alike on every x86-64 CPU.
//
// Per output, super-blocks in order from a zero acc. Of each super-block, the exact integers
//   c = Σ_j sc_j · Σ_{i in sub-block j} q_i · y_i   (Q6_K: its codes q − 32, signed scales)
//   m = Σ_j mn_j · Σ_{i in sub-block j} y_i          (Q4_K, Q5_K: from the activations' bsums)
// then acc = fma(float(c), d_w·d_x, acc) and, for Q4_K/Q5_K, acc = fma(float(−m), dmin_w·d_x, acc),
// with d_w·d_x and dmin_w·d_x each one f32 product. The integers are exact on every ISA (maddubs
// pairs stay below 2¹⁵ for codes below 64), so only these two roundings per super-block reach
// the output, in this order.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul_kernels.h"
#include "tensor/dtype.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {

// RowsDotFn over Q8_K activation rows, for each weight type.
struct KQuantKernels {
  RowsDotFn q4_k, q5_k, q6_k;
  int tile_rows;  // activation rows per call
};

const KQuantKernels& scalar_kquant_kernels();

// One super-block of Q4_K, Q5_K or Q6_K decoded: its codes as unsigned integers (Q6_K's before
// the −32 offset), element by element, and its sub-block scales (Q6_K: 16, signed) and mins
// (Q4_K, Q5_K: 8 of each). What the packed copies of kquant_panels.h are made from.
struct KQuantBlockCodes {
  uint8_t u[QK_K];
  int32_t sc[16], mn[8];
};
void decode_kquant_block(DType t, const void* block, KQuantBlockCodes& out);
// nullptr when this build has no AVX2 code; callers check CPU support themselves.
const KQuantKernels* avx2_kquant_kernels();

}  // namespace kestrel::cpu
