// AVX-512 Gated DeltaNet kernels (gated_deltanet_kernels.h): the AVX2 kernels' operations on
// sixteen lanes, so the same bits; tails go through the scalar loops.
#include "backend/cpu/gated_deltanet_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)

#include <immintrin.h>

#include "backend/cpu/simd_math_avx512.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

void load_taps(const float* src, int taps, __m512* p) {
  alignas(64) float t[kMaxConvKernel][16];
  for (int l = 0; l < 16; ++l)
    for (int i = 0; i < taps; ++i) t[i][l] = src[l * taps + i];
  for (int i = 0; i < taps; ++i) p[i] = _mm512_load_ps(t[i]);
}

void store_taps(const __m512* p, int taps, float* dst) {
  alignas(64) float t[kMaxConvKernel][16];
  for (int i = 0; i < taps; ++i) _mm512_store_ps(t[i], p[i]);
  for (int l = 0; l < 16; ++l)
    for (int i = 0; i < taps; ++i) dst[l * taps + i] = t[i][l];
}

void conv(const float* x, float* y, int64_t stride, const float* weight, int kernel, int64_t n,
          const SequenceStates& s) {
  const int taps = kernel - 1;
  const int64_t full = n / 16 * 16;
  for (int64_t c0 = 0; c0 < full; c0 += 16) {
    __m512 w[kMaxConvKernel], p[kMaxConvKernel];
    alignas(64) float wt[kMaxConvKernel][16];
    for (int l = 0; l < 16; ++l)
      for (int i = 0; i < kernel; ++i) wt[i][l] = weight[(c0 + l) * kernel + i];
    for (int i = 0; i < kernel; ++i) w[i] = _mm512_load_ps(wt[i]);
    load_taps(s.state + c0 * taps, taps, p);
    for (int64_t t = 0; t < s.tokens; ++t) {
      if (s.hold != nullptr && t == s.tokens - 1) store_taps(p, taps, s.hold + c0 * taps);
      const __m512 in = _mm512_loadu_ps(x + t * stride + c0);
      __m512 acc = _mm512_mul_ps(w[taps], in);
      for (int i = 0; i < taps; ++i) acc = _mm512_fmadd_ps(w[i], p[i], acc);
      for (int i = 0; i + 1 < taps; ++i) p[i] = p[i + 1];
      p[taps - 1] = in;
      _mm512_storeu_ps(y + t * stride + c0, acc);
      if (s.snapshots != nullptr && t >= s.first_snapshot && t < s.tokens - 1)
        store_taps(p, taps, s.snapshots + (t - s.first_snapshot) * s.snapshot_stride + c0 * taps);
    }
    store_taps(p, taps, s.state + c0 * taps);
  }
  conv_channels_scalar(x, y, stride, weight, kernel, full, n, s);
}

template <int V>
void delta_slice(float* m, int64_t key_dim, int64_t value_dim, int64_t c0, const float* k,
                 const float* q, const float* v, __m512 beta, __m512 decay, float* out, DType act) {
  __m512 u[V], o[V];
  for (int j = 0; j < V; ++j) u[j] = o[j] = _mm512_setzero_ps();
  for (int64_t r = 0; r < key_dim; ++r) {
    const float* row = m + r * value_dim + c0;
    const __m512 kr = _mm512_set1_ps(k[r]);
    for (int j = 0; j < V; ++j)
      u[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(row + 16 * j), decay), kr, u[j]);
  }
  for (int j = 0; j < V; ++j)
    u[j] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c0 + 16 * j), u[j]), beta);
  for (int64_t r = 0; r < key_dim; ++r) {
    float* row = m + r * value_dim + c0;
    const __m512 kr = _mm512_set1_ps(k[r]), qr = _mm512_set1_ps(q[r]);
    for (int j = 0; j < V; ++j) {
      const __m512 x =
          _mm512_fmadd_ps(kr, u[j], _mm512_mul_ps(_mm512_loadu_ps(row + 16 * j), decay));
      _mm512_storeu_ps(row + 16 * j, x);
      o[j] = _mm512_fmadd_ps(x, qr, o[j]);
    }
  }
  for (int j = 0; j < V; ++j) _mm512_storeu_ps(out + c0 + 16 * j, simd512::round_to16(act, o[j]));
}

void delta_step(float* m, int64_t key_dim, int64_t value_dim, const float* k, const float* q,
                const float* v, float beta, float decay, float* out, DType act) {
  // Eight vectors a slice: a 128-wide head in one pass over its rows.
  constexpr int kVectors = 8;
  const __m512 vb = _mm512_set1_ps(beta), vd = _mm512_set1_ps(decay);
  const int64_t full = value_dim / 16 * 16;
  int64_t c0 = 0;
  for (; c0 + 16 * kVectors <= full; c0 += 16 * kVectors)
    delta_slice<kVectors>(m, key_dim, value_dim, c0, k, q, v, vb, vd, out, act);
  for (; c0 + 64 <= full; c0 += 64)
    delta_slice<4>(m, key_dim, value_dim, c0, k, q, v, vb, vd, out, act);
  for (; c0 < full; c0 += 16) delta_slice<1>(m, key_dim, value_dim, c0, k, q, v, vb, vd, out, act);
  delta_columns_scalar(m, key_dim, value_dim, full, value_dim, k, q, v, beta, decay, out, act);
}

constexpr GatedDeltaNetKernels kKernels = {conv, delta_step};

}  // namespace

const GatedDeltaNetKernels* avx512_gated_deltanet_kernels() {
  return &kKernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const GatedDeltaNetKernels* avx512_gated_deltanet_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
