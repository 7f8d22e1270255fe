// backend/cpu/float_panels.h — a packed copy of F32/F16/BF16 weights for the float GEMMs
// (matmul_float_panel_avx512.cc, matmul_float_panel_avx2.cc), the float counterpart of
// packed_matmul.h's int8 panels.
//
// Why: the row-major weight makes a dot product per output — sixteen partial sums along K, then
// a horizontal sum — so every activation row re-converts each weight vector and the register tile
// is small. Here output rows go in panels of kPanelRows and, for each k in order, the panel holds
// its sixteen rows' w[n][k] side by side (in the weight's own dtype: the copy is as large as the
// weight). One vector of weights then meets one broadcast activation in one FMA that advances
// sixteen outputs, and a register tile of R rows × P panels reuses each conversion R times.
//
// Arithmetic, the same for every batch, tile and thread split: each output is
// acc = fma(x[k], w[k], acc) for k = 0, 1, ..., K-1 from acc = 0, one f32 FMA per element in K
// order. (Sums along K are then sequential rather than in sixteen lanes; in f32 the difference
// is far below the weights' own precision.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/packed_matmul.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// Whether pack_float_weight handles this tensor: a 2-D F32, F16 or BF16 weight.
bool float_packable(const Tensor& w);

inline size_t float_panel_bytes(DType t, int64_t k) {
  return size_t(k) * kPanelRows * (t == DType::F32 ? 4 : 2);
}

// The packed copy: packed_panels(N) panels one after the other; a last, partial panel is padded
// with zero rows.
std::unique_ptr<uint8_t[]> pack_float_weight(const Tensor& w);

// Up to this many activation rows run as one register tile (a batched decode), reading the
// activations transposed: every weight vector is then loaded once per call.
constexpr int64_t kFloatSinglePassRows = 16;

// xt[i * m + r] = x[r * k + i]: the layout FloatGemm::xt takes.
void transpose_activations(const float* x, int64_t m, int64_t k, float* xt);

// One float panel GEMM: y[r * y_stride + n] = Σ_k w[n][k]·x[r * k_dim + k] for r < m, n < n_rows.
struct FloatGemm {
  DType type;
  const uint8_t* w;  // the packed copy
  int64_t n, k;
  const float* x;
  int64_t m;
  float* y;
  int64_t y_stride;
  const float* xt;  // x transposed (transpose_activations) when m <= kFloatSinglePassRows
};
// Computes every row of y for the panels [p0, p1).
using FloatGemmFn = void (*)(const FloatGemm& g, int64_t p0, int64_t p1);

// A FloatGemmFn that runs the kernel for g's weight type (as gemm_for_type, packed_matmul.h).
template <FloatGemmFn kF32, FloatGemmFn kF16, FloatGemmFn kBF16>
void float_gemm_for_type(const FloatGemm& g, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::F32:
      return kF32(g, p0, p1);
    case DType::F16:
      return kF16(g, p0, p1);
    default:
      return kBF16(g, p0, p1);
  }
}

// nullptr where this build lacks AVX-512.
FloatGemmFn avx512_float_gemm();
// The same GEMM on AVX2 (two 8-lane halves per panel; matmul_float_panel_avx2.cc), the same
// bits; it does not read xt.
FloatGemmFn avx2_float_gemm();

}  // namespace kestrel::cpu
