#include "backend/cpu/attention_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/simd_math.h"
#include "base/fp16.h"

namespace kestrel::cpu {

void store_cache_row(DType t, const float* src, void* dst, int64_t n) {
  if (n == 0) return;  // src may be null (an MLA cache without a rope part)
  if (t == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  if (t == DType::F16) {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(d + i),
          _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
  } else {
    for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

void widen_cache_row(DType t, const uint8_t* src, float* dst, int n) {
  int i = 0;
  if (t == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
    i = n;
  } else {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    if (t == DType::F16) {
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
      for (; i < n; ++i) dst[i] = f16_to_f32(h[i]);
    } else {
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            dst + i,
            _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))),
                16)));
      for (; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
    }
  }
  for (; i < round_up8(n); ++i) dst[i] = 0.0f;
}

void widen_cache_rows(DType t, const uint8_t* const* src, int count, float* dst, int64_t dst_stride,
                      int n) {
  if (t != DType::F16 || n % 8 != 0) {
    for (int r = 0; r < count; ++r) widen_cache_row(t, src[r], dst + r * dst_stride, n);
    return;
  }
  for (int r = 0; r < count; ++r) {
    const auto* h = reinterpret_cast<const __m128i*>(src[r]);
    float* d = dst + r * dst_stride;
    for (int i = 0; i < n / 8; ++i)
      _mm256_storeu_ps(d + 8 * i, _mm256_cvtph_ps(_mm_loadu_si128(h + i)));
  }
}

void softmax_row(float* sc, int64_t n, DType p_dtype) {
  const int64_t np = round_up8(n);
  std::fill(sc + n, sc + np, -std::numeric_limits<float>::infinity());
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
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
  const __m256 inv = _mm256_set1_ps(1.0f / simd::hsum8(sum));
  for (int64_t j = 0; j < np; j += 8)
    _mm256_storeu_ps(sc + j, simd::round_to8(p_dtype, _mm256_mul_ps(_mm256_loadu_ps(sc + j), inv)));
}

}  // namespace kestrel::cpu
