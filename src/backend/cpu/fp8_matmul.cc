// The portable FP8 kernel of fp8_matmul.h (the arithmetic written out, one output at a time) and
// the block-scale layout of a weight.
#include "backend/cpu/fp8_matmul.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "backend/cpu/packed_matmul.h"
#include "base/fp16.h"
#include "base/status.h"
#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// Every code's v = value · 2⁻⁸ as the SIMD kernels decode it (fp8_matmul.h).
const float* fp8_scaled_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = f16_to_f32(fp8_e4m3_to_f16_scaled(uint8_t(c)));
    return t;
  }();
  return table.data();
}

template <int NX>
void one_row(const Fp8Weight& w, int64_t j, const float* const* xr, float* out, int64_t os) {
  const float* values = fp8_scaled_values();
  const uint8_t* q = w.row_codes(j);
  const float* scale = w.row_scales(j);
  float acc[NX] = {};
  for (int64_t c0 = 0, b = 0; c0 < w.k; c0 += w.block_cols, ++b) {
    const int64_t c1 = std::min(w.k, c0 + w.block_cols);
    float s[NX] = {};
    for (int64_t i = c0; i < c1; ++i) {
      const float v = values[q[i]];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) s[r] = std::fma(v, xr[r][i], s[r]);
    }
    const float sb = scale[b] * kFp8F16Scale;
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) acc[r] = std::fma(s[r], sb, acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) out[r * os] = acc[r];
}

void fp8_rows(const Fp8Weight& w, int64_t j0, int64_t nw, const void* x, size_t xs, int nx,
              float* out, int64_t os) {
  const float* xr[kMaxTileRows];
  nx = std::clamp(nx, 1, kMaxTileRows);
  for (int r = 0; r < nx; ++r)
    xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
  using Row = void (*)(const Fp8Weight&, int64_t, const float* const*, float*, int64_t);
  static constexpr Row kRow[kMaxTileRows] = {one_row<1>, one_row<2>, one_row<3>, one_row<4>};
  for (int64_t j = 0; j < nw; ++j) kRow[nx - 1](w, j0 + j, xr, out + j, os);
}

constexpr Fp8Kernels kScalarFp8Kernels = {fp8_rows, kMaxTileRows};

// The scale of an FP8 weight without block_scale.
constexpr float kUnitScale = 1.0f;

}  // namespace

const Fp8Kernels& scalar_fp8_kernels() {
  return kScalarFp8Kernels;
}

std::unique_ptr<uint8_t[]> pack_fp8_panels(const Tensor& w) {
  KCHECK(w.dtype == DType::F8_E4M3 && w.shape.ndim == 2, "pack_fp8_panels: {} [{}]",
         dtype_name(w.dtype), w.shape.str());
  const int64_t n = w.rows(), k = w.cols();
  const size_t panel_bytes = size_t(k) * kPanelRows;
  auto out = std::make_unique<uint8_t[]>(size_t(packed_panels(n)) * panel_bytes);  // zeroed
  const auto* codes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* dst = out.get() + size_t(r / kPanelRows) * panel_bytes + r % kPanelRows;
    for (int64_t i = 0; i < k; ++i) dst[size_t(i) * kPanelRows] = codes[r * k + i];
  }
  return out;
}

Fp8Weight fp8_weight(const LinearWeight& lw) {
  const Tensor& w = lw.w;
  const WeightScales& s = lw.scales;
  KCHECK(w.dtype == DType::F8_E4M3, "fp8_weight: dtype {} is not f8_e4m3", dtype_name(w.dtype));
  Fp8Weight f;
  f.codes = static_cast<const uint8_t*>(w.data);
  f.k = w.cols();
  if (s.block == nullptr) {
    f.scale = &kUnitScale;
    f.block_rows = std::max<int64_t>(w.rows(), 1);
    f.block_cols = std::max<int64_t>(f.k, 1);
    return f;
  }
  KCHECK(s.block_rows > 0 && s.block_cols > 0,
         "fp8_weight: block scale of {}x{} elements (both must be at least 1)", s.block_rows,
         s.block_cols);
  f.scale = s.block;
  f.block_rows = s.block_rows;
  f.block_cols = s.block_cols;
  f.scale_stride = (f.k + f.block_cols - 1) / f.block_cols;
  return f;
}

}  // namespace kestrel::cpu
