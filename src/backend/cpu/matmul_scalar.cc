// The portable float row kernels of matmul_kernels.h: the arithmetic written out, one output at
// a time.
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "base/fp16.h"

namespace kestrel::cpu {
namespace {

template <typename T>
const T* row(const void* x, size_t stride, int r) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + size_t(r) * stride);
}

template <int NX>
void store(const float* acc, float* out, int64_t out_stride) {
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) out[r * out_stride] = acc[r];
}

// ---- float weights ----

struct F32W {
  static float at(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};
struct F16W {
  static float at(const void* w, int64_t i) {
    return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
};
struct BF16W {
  static float at(const void* w, int64_t i) {
    return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
};

template <typename W>
struct FloatDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    float acc[NX] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float wi = W::at(w, i);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) acc[r] = std::fma(wi, row<float>(x, xs, r)[i], acc[r]);
    }
    store<NX>(acc, out, os);
  }
};

template <typename W>
void float_rows(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx, int64_t k,
                float* out, int64_t os) {
  for (int64_t j = 0; j < nw; ++j)
    dispatch_tile<FloatDot<W>>(static_cast<const uint8_t*>(w) + size_t(j) * ws, x, xs, nx, k,
                               out + j, os);
}

}  // namespace

const DotKernels& scalar_dot_kernels() {
  static const DotKernels k = {
      .f32 = float_rows<F32W>,
      .f16 = float_rows<F16W>,
      .bf16 = float_rows<BF16W>,
      .tile_rows = kMaxTileRows,
  };
  return k;
}

}  // namespace kestrel::cpu
