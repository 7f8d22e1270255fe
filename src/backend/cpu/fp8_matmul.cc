// Portable FP8 kernel (the reference for the SIMD ones and the fallback without AVX2), kernel
// selection, and the block-scale layout of a weight.
#include "backend/cpu/fp8_matmul.h"

#include <algorithm>
#include <array>

#include "base/status.h"
#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// Every code's exact value, NaN codes included: a lookup is cheaper than decoding the fields.
const float* fp8_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_e4m3_to_f32(uint8_t(c));
    return t;
  }();
  return table.data();
}

struct Fp8Dot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Fp8Row& row = *static_cast<const Fp8Row*>(w);
    const float* values = fp8_values();
    const float* xr[NX];
    float total[NX] = {};
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
    }
    for (int64_t c0 = 0, b = 0; c0 < k; c0 += row.block_cols, ++b) {
      const int64_t c1 = std::min(k, c0 + row.block_cols);
      float acc[NX] = {};
      for (int64_t i = c0; i < c1; ++i) {
        const float wi = values[row.codes[i]];
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) acc[r] += wi * xr[r][i];
      }
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) total[r] += acc[r] * row.scale[b];
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = total[r];
  }
};

constexpr Fp8Kernels kScalarFp8Kernels = {dispatch_tile<Fp8Dot>, kMaxTileRows};

// The scale of an FP8 weight without block_scale.
constexpr float kUnitScale = 1.0f;

}  // namespace

const Fp8Kernels& scalar_fp8_kernels() {
  return kScalarFp8Kernels;
}

const Fp8Kernels& fp8_kernels(std::string_view isa) {
  const Fp8Kernels* k = nullptr;
  if (isa == "avx512") k = avx512_fp8_kernels();
  if (k == nullptr && (isa == "avx512" || isa == "avx2")) k = avx2_fp8_kernels();
  return k != nullptr ? *k : scalar_fp8_kernels();
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
