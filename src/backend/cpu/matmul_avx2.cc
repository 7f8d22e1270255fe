// The AVX2 float row kernels of matmul_kernels.h: eight weight rows at a time as the eight f32
// lanes, so every output is one lane of one fma chain along k, as in the scalar kernel. An 8×8
// block of the rows is transposed in registers to give each k's eight weights as one vector.
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>

#include "backend/cpu/matmul_x86_common.h"

namespace kestrel::cpu {
namespace {

// Weight rows [0, valid) of the eight at w (the missing lanes repeat the last row and are not
// stored) against NX activation rows.
template <typename W, int NX>
void eight_rows(const uint8_t* w, size_t ws, int valid, const uint8_t* x, size_t xs, int64_t k,
                float* out, int64_t os) {
  const void* rows[8];
#pragma GCC unroll 8
  for (int l = 0; l < 8; ++l) rows[l] = w + size_t(l < valid ? l : valid - 1) * ws;
  const float* xr[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) {
    xr[r] = row<float>(x, xs, r);
    acc[r] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 v[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) v[l] = W::load8(rows[l], i);
    transpose8(v);
#pragma GCC unroll 8
    for (int e = 0; e < 8; ++e)
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r)
        acc[r] = _mm256_fmadd_ps(v[e], _mm256_broadcast_ss(xr[r] + i + e), acc[r]);
  }
  for (; i < k; ++i) {
    const __m256 we =
        _mm256_setr_ps(W::at(rows[0], i), W::at(rows[1], i), W::at(rows[2], i), W::at(rows[3], i),
                       W::at(rows[4], i), W::at(rows[5], i), W::at(rows[6], i), W::at(rows[7], i));
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r)
      acc[r] = _mm256_fmadd_ps(we, _mm256_broadcast_ss(xr[r] + i), acc[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) store_lanes(out + r * os, acc[r], valid);
}

template <typename W>
void float_rows(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx, int64_t k,
                float* out, int64_t os) {
  static constexpr EightRowsFn kRows[kMaxTileRows] = {eight_rows<W, 1>, eight_rows<W, 2>,
                                                      eight_rows<W, 3>, eight_rows<W, 4>};
  over_eight_rows(kRows, w, ws, nw, x, xs, nx, k, out, os);
}

constexpr DotKernels kAvx2Kernels = {float_rows<F32W>, float_rows<F16W>, float_rows<BF16W>,
                                     kMaxTileRows};

}  // namespace

const DotKernels* avx2_dot_kernels() {
  return &kAvx2Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const DotKernels* avx2_dot_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
