#include "backend/cpu/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/simd_math.h"
#include "base/fp16.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* y,
              DType act) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    // Accumulate in double: the f32 reference sums in f32, but a wider sum is never further
    // from the exact value and keeps long rows stable. Eight lanes (each square is exact in
    // double): one serial chain of double adds made this a visible share of a decode step.
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      s0 = _mm256_fmadd_pd(lo, lo, s0);
      s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
    double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < dim; ++i) ss += double(xr[i]) * xr[i];
    const float scale = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    if (act == DType::F32) {
      for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * scale);
    } else {
      // Eight lanes through round_to8, which rounds exactly as the scalar round_to of the tail.
      const __m256 vs = _mm256_set1_ps(scale);
      int64_t i = 0;
      for (; i + 8 <= dim; i += 8) {
        const __m256 n = simd::round_to8(act, _mm256_mul_ps(_mm256_loadu_ps(xr + i), vs));
        _mm256_storeu_ps(yr + i, simd::round_to8(act, _mm256_mul_ps(_mm256_loadu_ps(w + i), n)));
      }
      for (; i < dim; ++i) yr[i] = round_to(act, w[i] * round_to(act, xr[i] * scale));
    }
  }
}

void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t rows,
                int64_t dim, float* y, DType act) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / double(dim);
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(ss / double(dim) + double(eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = float((xr[i] - mean) * rstd) * w[i] + b[i];
    round_to(act, yr, dim);
  }
}

void add_rms_norm(float* x, const float* y, const float* w, float eps, int64_t rows, int64_t dim,
                  float* out, DType act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * dim;
    add_inplace(xr, y + r * dim, dim);
    round_to(act, xr, dim);
    rms_norm(xr, w, eps, 1, dim, out + r * dim, act);
  }
}

namespace {

// out = r(r(g) / (1 + e^(exponent(r(g)))) · r(u)) over eight lanes at a time, r rounding to act:
// SiLU and GELU-tanh are both g times a logistic of g. The tail goes through the same eight
// lanes: an element's value must not depend on where a thread's chunk (or the batch) ends.
template <typename Exponent>
void gated_product(const float* gate, const float* up, float* out, int64_t n, DType act,
                   Exponent exponent) {
  const __m256 one = _mm256_set1_ps(1.0f);
  auto eight = [&](const float* g8, const float* u8, float* o8) {
    const __m256 g = simd::round_to8(act, _mm256_loadu_ps(g8));
    const __m256 u = simd::round_to8(act, _mm256_loadu_ps(u8));
    const __m256 e = simd::exp8(exponent(g));
    // The activation is rounded before the product, as the reference stores act_fn(gate) first.
    const __m256 s = simd::round_to8(act, _mm256_div_ps(g, _mm256_add_ps(one, e)));
    _mm256_storeu_ps(o8, simd::round_to8(act, _mm256_mul_ps(s, u)));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) eight(gate + i, up + i, out + i);
  if (i < n) {
    float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    eight(g, u, o);
    std::copy(o, o + (n - i), out + i);
  }
}

}  // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n, DType act) {
  gated_product(gate, up, out, n, act,
                [](__m256 g) { return _mm256_sub_ps(_mm256_setzero_ps(), g); });
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, DType act) {
  // 0.5 g (1 + tanh(v)) = g / (1 + e^(-2v)), v = sqrt(2/pi) (g + 0.044715 g^3).
  const __m256 k = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 c = _mm256_set1_ps(0.044715f);
  gated_product(gate, up, out, n, act, [&](__m256 g) {
    return _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g));
  });
}

void scale(float* x, int64_t n, float f, DType act) {
  const __m256 vf = _mm256_set1_ps(f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, simd::round_to8(act, _mm256_mul_ps(_mm256_loadu_ps(x + i), vf)));
  for (; i < n; ++i) x[i] = round_to(act, x[i] * f);
}

float max_abs(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void softcap(float* x, int64_t n, float c, DType act) {
  for (int64_t i = 0; i < n; ++i) x[i] /= c;
  round_to(act, x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
  round_to(act, x, n);
  for (int64_t i = 0; i < n; ++i) x[i] *= c;
  round_to(act, x, n);
}

void sigmoid_mul(float* x, const float* gate, int64_t rows, int64_t dim, int64_t gate_dim,
                 DType act) {
  // The gates a block at a time on the stack, so each rounding is one vector pass.
  constexpr int64_t kBlock = 256;
  float s[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i0 = 0; i0 < dim; i0 += kBlock) {
      const int64_t n = std::min(kBlock, dim - i0);
      const float* g = gate + r * gate_dim + (gate_dim == 1 ? 0 : i0);
      for (int64_t i = 0; i < n; ++i) s[i] = g[gate_dim == 1 ? 0 : i];
      round_to(act, s, n);
      for (int64_t i = 0; i < n; ++i) s[i] = 1.0f / (1.0f + std::exp(-s[i]));
      round_to(act, s, n);
      float* xr = x + r * dim + i0;
      for (int64_t i = 0; i < n; ++i) xr[i] *= s[i];
      round_to(act, xr, n);
    }
  }
}

void copy_rows(const RowCopy& c, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = c.src + (c.src_rows != nullptr ? c.src_rows[r] : r) * c.src_row;
    float* dst = c.dst + r * c.dst_row;
    for (int64_t b = 0; b < c.blocks; ++b)
      std::memcpy(dst + b * c.dst_block, src + b * c.src_block, size_t(c.width) * sizeof(float));
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) add_inplace(y + r * n, bias, n);
}

float round_to(DType dt, float x) {
  if (dt == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (dt == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}

void round_to(DType dt, float* x, int64_t n) {
  if (dt == DType::F32) return;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, simd::round_to8(dt, _mm256_loadu_ps(x + i)));
  x += i;
  n -= i;
  if (dt == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  } else if (dt == DType::F16) {
    for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  }
}

void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.cols();
  for (int64_t t = 0; t < n; ++t) {
    KCHECK(ids[t] >= 0 && ids[t] < table.rows(), "token id {} out of range [0, {})", ids[t],
           table.rows());
    dequantize_row(table.dtype, table.row(ids[t]), out + t * dim, dim);
  }
}

}  // namespace kestrel::cpu
