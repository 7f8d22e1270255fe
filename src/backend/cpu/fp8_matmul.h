// backend/cpu/fp8_matmul.h — the linear() kernels for F8_E4M3 weights with block scales
// (WeightScales::block, DeepSeek-V3's 128×128 `weight_scale_inv`), one arithmetic on every ISA.
//
// A code's value enters as v = value · 2⁻⁸ (fp8_e4m3_to_f16_scaled, exact; NaN codes, which
// quantized checkpoints never hold, become ±480 · 2⁻⁸ everywhere). Per output, per block b of
// columns in order from a zero acc: s_b = one fma chain over the block's columns in order,
// s = fma(v_i, x_i, s) from zero; then acc = fma(s_b, scale_b · 2⁸, acc). Scaling by a power of
// two is exact, so this is the unscaled block sum times the block's scale, save for products
// below f32's normal range.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/matmul_kernels.h"
#include "backend/linear_weight.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// Where an FP8 weight's rows and block scales are.
struct Fp8Weight {
  const uint8_t* codes = nullptr;  // [rows, k]; nullptr: not an FP8 weight
  const float* scale = nullptr;    // [ceil(rows / block_rows), scale_stride]
  int64_t k = 0, block_rows = 1, block_cols = 1, scale_stride = 0;

  const uint8_t* row_codes(int64_t j) const { return codes + j * k; }
  // Row j's block scales: scale b covers columns [b · block_cols, (b + 1) · block_cols).
  const float* row_scales(int64_t j) const { return scale + (j / block_rows) * scale_stride; }
};

// out[r · out_stride + j] = row j0 + j of w against row r of x (f32 rows x_stride bytes apart),
// for j < nw, r < nx (1 ≤ nx ≤ tile_rows).
using Fp8RowsFn = void (*)(const Fp8Weight& w, int64_t j0, int64_t nw, const void* x,
                           size_t x_stride, int nx, float* out, int64_t out_stride);

struct Fp8Kernels {
  Fp8RowsFn rows;
  int tile_rows;  // activation rows per call
};

const Fp8Kernels& scalar_fp8_kernels();
// nullptr when this build has no AVX2 code; callers check CPU support themselves. AVX-512 CPUs
// run these too.
const Fp8Kernels* avx2_fp8_kernels();

// The panels: a packed copy of an FP8 weight with the codes of kPanelRows rows side by side,
// [panel][k][kPanelRows] bytes (the padding rows' codes 0), so one 8-byte load gives eight rows'
// weights at one k. The kernel computes the arithmetic above with rows as lanes.
std::unique_ptr<uint8_t[]> pack_fp8_panels(const Tensor& w);

// Panels [p0, p1) of `panels` (w's packed copy; w for its block scales) against m f32 activation
// rows x_stride bytes apart: y[i · ldy + j] for the panels' rows j < n.
using Fp8PanelsFn = void (*)(const Fp8Weight& w, const uint8_t* panels, int64_t n, const void* x,
                             size_t x_stride, int64_t m, float* y, int64_t ldy, int64_t p0,
                             int64_t p1);
// nullptr when this build has no AVX2 code.
Fp8PanelsFn avx2_fp8_panels();

// w must be F8_E4M3. Without block scales every scale is 1 (one block spanning each row). Aborts
// with a message on a block size below 1.
Fp8Weight fp8_weight(const LinearWeight& w);

}  // namespace kestrel::cpu
