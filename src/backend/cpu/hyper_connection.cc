#include "backend/cpu/hyper_connection.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/simd_math.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// Σ a[d]·b[d] in f32: eight lanes in dimension order, a fixed tree, then the tail in order.
float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  float s = simd::hsum8(acc);
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

float round1(DType act, float v) {
  round_to(act, &v, 1);
  return v;
}

}  // namespace

void hc_coefficients(const HyperConnection& hc, const float* x, int64_t T, int64_t hidden,
                     float* pre, float* post, float* comb) {
  const int n = hc.streams;
  KCHECK(n > 0 && n <= 8 && hc.sinkhorn_iters >= 1, "mHC with {} streams and {} iterations", n,
         hc.sinkhorn_iters);
  const int64_t width = n * hidden, rows = (2 + n) * n;
  float z[(2 + 8) * 8];
  float m[8][8];
  for (int64_t t = 0; t < T; ++t) {
    const float* f = x + t * width;
    // The RMS in f32 as the reference takes it (a mean of squares, then rsqrt).
    __m256 acc = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 8 <= width; d += 8) {
      const __m256 v = _mm256_loadu_ps(f + d);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = simd::hsum8(acc);
    for (; d < width; ++d) ss += f[d] * f[d];
    const float inv = 1.0f / std::sqrt(ss / float(width) + hc.rms_eps);
    for (int64_t r = 0; r < rows; ++r) {
      const float part = hc.scale[r < n ? 0 : r < 2 * n ? 1 : 2];
      z[r] = dot(hc.fn + r * width, f, width) * inv * part + hc.base[r];
    }
    for (int j = 0; j < n; ++j) {
      pre[t * n + j] = sigmoid(z[j]) + hc.hc_eps;
      post[t * n + j] = 2.0f * sigmoid(z[n + j]);
    }
    // Sinkhorn: a row softmax (+ eps), columns normalised, then rows and columns in turn.
    for (int j = 0; j < n; ++j) {
      const float* zr = z + 2 * n + j * n;
      const float mx = *std::max_element(zr, zr + n);
      float sum = 0.0f;
      for (int k = 0; k < n; ++k) sum += (m[j][k] = std::exp(zr[k] - mx));
      for (int k = 0; k < n; ++k) m[j][k] = m[j][k] / sum + hc.hc_eps;
    }
    auto columns = [&] {
      for (int k = 0; k < n; ++k) {
        float s = 0.0f;
        for (int j = 0; j < n; ++j) s += m[j][k];
        for (int j = 0; j < n; ++j) m[j][k] /= s + hc.hc_eps;
      }
    };
    auto rows_norm = [&] {
      for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int k = 0; k < n; ++k) s += m[j][k];
        for (int k = 0; k < n; ++k) m[j][k] /= s + hc.hc_eps;
      }
    };
    columns();
    for (int it = 1; it < hc.sinkhorn_iters; ++it) {
      rows_norm();
      columns();
    }
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) comb[(t * n + j) * n + k] = m[j][k];
  }
}

void hc_collapse(const float* x, const float* pre, int64_t T, int n, int64_t hidden, float* out,
                 DType act) {
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * hidden;
    const float* xs = x + t * n * hidden;
    for (int64_t d = 0; d < hidden; ++d) {
      float s = 0.0f;
      for (int j = 0; j < n; ++j) s += pre[t * n + j] * xs[j * hidden + d];
      o[d] = s;
    }
    round_to(act, o, hidden);
  }
}

void hc_expand(float* x, const float* y, const float* post, const float* comb, int64_t T, int n,
               int64_t hidden, DType act) {
  std::vector<float> mixed(size_t(n * hidden));
  float c[8][8], p[8];
  for (int64_t t = 0; t < T; ++t) {
    float* xs = x + t * n * hidden;
    const float* yt = y + t * hidden;
    for (int j = 0; j < n; ++j) {
      p[j] = round1(act, post[t * n + j]);
      for (int k = 0; k < n; ++k) c[j][k] = round1(act, comb[(t * n + j) * n + k]);
    }
    for (int k = 0; k < n; ++k)
      for (int64_t d = 0; d < hidden; ++d) {
        float s = 0.0f;
        for (int j = 0; j < n; ++j) s += c[j][k] * xs[j * hidden + d];
        mixed[size_t(k * hidden + d)] = s;
      }
    round_to(act, mixed.data(), n * hidden);
    for (int k = 0; k < n; ++k) {
      float* xk = xs + k * hidden;
      for (int64_t d = 0; d < hidden; ++d) xk[d] = round1(act, p[k] * yt[d]);
      for (int64_t d = 0; d < hidden; ++d) xk[d] += mixed[size_t(k * hidden + d)];
      round_to(act, xk, hidden);
    }
  }
}

}  // namespace kestrel::cpu
