// backend/cpu/q8_block_dot.h — the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4)
// against int8 activations, computed the one way every ISA follows (packed_matmul.h,
// "Arithmetic"): per output, blocks in order from a zero acc, the exact integer
// c = Σ w_code·x_code of the block (Q4_0 with its codes u − 8, Q5_0 with u − 16, Q4_1 and Q5_1
// with u, MXFP4 with its E2M1 values doubled, d_w its E8M0 scale halved), then
// acc = fma(float(c)·d_x, d_w, acc) and, for the formats with a min,
// acc = fma(m_w, s_x, acc). The packed VNNI and AMX GEMMs (AVX2 and AVX-512, over packed copies of
// all five formats) and the row kernels here (scalar and AVX2, over the stored GGUF rows) give the
// same bits, so a model answers alike on every x86-64 CPU.
//
// Activations are Q8S rows: Q8_0's codes and its f16-rounded scale d_x (as f32), plus s_x =
// d_x·Σ codes in f32 (the exact sum, where llama.cpp's Q8_1 rounds s to f16) — the values the
// packed activations hold (quantize_q8_block, packed_matmul.h).
#pragma once

#include <cstdint>

#include "backend/cpu/matmul_kernels.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {

struct BlockQ8S {
  float d;  // d_x
  float s;  // d_x · Σ qs
  int8_t qs[QK];
};

// A row of k activations (k a multiple of 32) as Q8S blocks.
void quantize_row_q8s(const float* x, BlockQ8S* y, int64_t k);

// RowsDotFn over Q8S activation rows, for each weight type.
struct Q8BlockKernels {
  RowsDotFn q4_0, q4_1, q5_0, q5_1, q8_0, mxfp4;
  int tile_rows;  // activation rows per call
};

const Q8BlockKernels& scalar_q8_block_kernels();
// nullptr when this build has no AVX2 code; callers check CPU support themselves.
const Q8BlockKernels* avx2_q8_block_kernels();

}  // namespace kestrel::cpu
