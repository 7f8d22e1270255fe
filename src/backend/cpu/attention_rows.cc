#include "backend/cpu/attention_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/simd_math.h"

namespace kestrel::cpu {

void softmax_row(float* sc, int64_t n, DType p_dtype) {
  // A sink of −inf adds e^(−inf) = 0 to the sum and changes no maximum: the same bits.
  softmax_row_with_sink(sc, n, -std::numeric_limits<float>::infinity(), p_dtype);
}

void softmax_row_with_sink(float* sc, int64_t n, float sink, DType p_dtype) {
  const int64_t np = round_up8(n);
  std::fill(sc + n, sc + np, -std::numeric_limits<float>::infinity());
  __m256 mx = _mm256_set1_ps(sink);
  for (int64_t j = 0; j < np; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sc + j));
  mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < np; j += 8) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mx));
    _mm256_storeu_ps(sc + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  const float total = simd::hsum8(sum) + std::exp(sink - _mm256_cvtss_f32(mx));
  const __m256 inv = _mm256_set1_ps(1.0f / total);
  for (int64_t j = 0; j < np; j += 8)
    _mm256_storeu_ps(sc + j, simd::round_to8(p_dtype, _mm256_mul_ps(_mm256_loadu_ps(sc + j), inv)));
}

}  // namespace kestrel::cpu
