// backend/cpu/fp8_matmul.h — the linear() kernels for F8_E4M3 weights with block scales
// (WeightScales::block, DeepSeek-V3's 128×128 `weight_scale_inv`).
//
// A kernel has the DotFn contract of matmul_kernels.h, except that `w` points to an Fp8Row: the
// row's codes and its block scales. Within each block of columns the unscaled products are summed
// in f32 and the sum is multiplied by the block's scale once; the block sums are then added up.
// Each weight element is decoded once per call and used for every activation row of the tile.
// NaN codes (0x7F, 0xFF), which quantized checkpoints never hold, give NaN in the scalar kernel
// and ±480 in the SIMD ones (fp8_e4m3_to_f16_scaled).
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cpu/matmul_kernels.h"
#include "backend/linear_weight.h"

namespace kestrel::cpu {

// One weight row as the FP8 kernels read it: k codes, and scale[b] for columns
// [b · block_cols, (b + 1) · block_cols).
struct Fp8Row {
  const uint8_t* codes;
  const float* scale;
  int64_t block_cols;
};

struct Fp8Kernels {
  DotFn dot;      // w: const Fp8Row*; x: f32 rows
  int tile_rows;  // activation rows per call, at most kMaxWideTileRows
};

const Fp8Kernels& scalar_fp8_kernels();
// nullptr when this build has no such code; callers check CPU support themselves.
const Fp8Kernels* avx2_fp8_kernels();
const Fp8Kernels* avx512_fp8_kernels();

// The kernels of an ISA named as linear_isa() names it ("avx512", "avx2", "scalar"), falling back
// to narrower ones this build lacks. The caller has checked that the CPU runs the ISA.
const Fp8Kernels& fp8_kernels(std::string_view isa);

// Where an FP8 weight's rows and block scales are.
struct Fp8Weight {
  const uint8_t* codes = nullptr;  // [rows, k]; nullptr: not an FP8 weight
  const float* scale = nullptr;    // [ceil(rows / block_rows), scale_stride]
  int64_t k = 0, block_rows = 1, block_cols = 1, scale_stride = 0;

  Fp8Row row(int64_t j) const {
    return {codes + j * k, scale + (j / block_rows) * scale_stride, block_cols};
  }
};

// w must be F8_E4M3. Without block scales every scale is 1 (one block spanning each row). Aborts
// with a message on a block size below 1.
Fp8Weight fp8_weight(const LinearWeight& w);

}  // namespace kestrel::cpu
