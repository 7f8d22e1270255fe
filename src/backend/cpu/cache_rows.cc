#include "backend/cpu/cache_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_rows.h"
#include "base/fp16.h"
#include "base/status.h"
#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

constexpr int kMxGroup = 32;

void store_float_row(DType t, const float* src, void* dst, int64_t n) {
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

void store_mxfp8_row(const float* src, uint8_t* dst, int64_t n) {
  KCHECK(n % kMxGroup == 0, "an MXFP8 row of {} values (not a multiple of {})", n, kMxGroup);
  for (int64_t g = 0; g < n / kMxGroup; ++g) {
    const float* x = src + g * kMxGroup;
    float amax = 0.0f;
    for (int i = 0; i < kMxGroup; ++i) amax = std::max(amax, std::fabs(x[i]));
    const uint8_t e = mx_e4m3_scale(amax);
    dst[n + g] = e;
    // Division by a power of two is exact (down to f32's subnormals).
    const float s = e8m0_to_f32(e);
    for (int i = 0; i < kMxGroup; ++i) dst[g * kMxGroup + i] = f32_to_fp8_e4m3(x[i] / s);
  }
}

// Eight codes at p as f32 code values (e4m3 and e5m2 through their f16 bit patterns; an e4m3
// code's pattern is its value / kFp8F16Scale, which the callers fold into a multiply they make).
__m256 load_e4m3x8_over_256(const uint8_t* p) {
  const __m128i t = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(t, _mm_set1_epi16(0x7F)), 7),
                                 _mm_slli_epi16(_mm_and_si128(t, _mm_set1_epi16(0x80)), 8));
  return _mm256_cvtph_ps(h);
}
__m256 load_e5m2x8(const uint8_t* p) {
  const __m128i t = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_slli_epi16(t, 8));
}
__m256 load_i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

float code_value(DType t, uint8_t q) {
  switch (t) {
    case DType::F8_E4M3:
      return fp8_e4m3_to_f32(q);
    case DType::F8_E5M2:
      return fp8_e5m2_to_f32(q);
    default:
      return float(int8_t(q));
  }
}

// Eight codes of a one-byte format as f32 code values (E4M3's divided by kFp8F16Scale).
template <DType T>
__m256 load_codes8(const uint8_t* p) {
  if constexpr (T == DType::F8_E4M3)
    return load_e4m3x8_over_256(p);
  else if constexpr (T == DType::F8_E5M2)
    return load_e5m2x8(p);
  else
    return load_i8x8(p);
}

// Quantized widening, (code − offset) · scale · gain per dimension, with the format and which
// terms are present fixed at compile time: decode widens every cached row of the context per
// step, and a test per eight values cost as much as the conversion.
template <DType T, bool kOffset, bool kScale>
void widen_codes(const CacheRowCodec& c, const uint8_t* src, float* dst, int n) {
  const __m256 gain = _mm256_set1_ps(T == DType::F8_E4M3 ? c.gain * kFp8F16Scale : c.gain);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = load_codes8<T>(src + i);
    if constexpr (kOffset) x = _mm256_sub_ps(x, _mm256_loadu_ps(c.offset + i));
    if constexpr (kScale) x = _mm256_mul_ps(x, _mm256_loadu_ps(c.scale + i));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(x, gain));
  }
  for (; i < n; ++i) {
    float x = code_value(T, src[i]);
    if constexpr (kOffset) x -= c.offset[i];
    if constexpr (kScale) x *= c.scale[i];
    dst[i] = x * c.gain;
  }
}

template <DType T>
void widen_codes(const CacheRowCodec& c, const uint8_t* src, float* dst, int n) {
  if (c.offset != nullptr) {
    c.scale != nullptr ? widen_codes<T, true, true>(c, src, dst, n)
                       : widen_codes<T, true, false>(c, src, dst, n);
  } else {
    c.scale != nullptr ? widen_codes<T, false, true>(c, src, dst, n)
                       : widen_codes<T, false, false>(c, src, dst, n);
  }
}

void widen_mxfp8(const uint8_t* src, float* dst, int n) {
  for (int g = 0; g < n / kMxGroup; ++g) {
    const __m256 s = _mm256_set1_ps(e8m0_to_f32(src[n + g]) * kFp8F16Scale);
    for (int j = g * kMxGroup; j < (g + 1) * kMxGroup; j += 8)
      _mm256_storeu_ps(dst + j, _mm256_mul_ps(load_e4m3x8_over_256(src + j), s));
  }
}

void widen_quantized_row(const CacheRowCodec& c, const uint8_t* src, float* dst, int n) {
  switch (c.dtype) {
    case DType::MXFP8:
      widen_mxfp8(src, dst, n);
      break;
    case DType::F8_E4M3:
      widen_codes<DType::F8_E4M3>(c, src, dst, n);
      break;
    case DType::F8_E5M2:
      widen_codes<DType::F8_E5M2>(c, src, dst, n);
      break;
    default:
      widen_codes<DType::I8>(c, src, dst, n);
  }
  for (int i = n; i < round_up8(n); ++i) dst[i] = 0.0f;
}

}  // namespace

void store_cache_row(const CacheRowCodec& c, const float* src, void* dst, int64_t n) {
  if (n == 0) return;
  auto* d = static_cast<uint8_t*>(dst);
  auto scaled = [&](int64_t i) {
    return (c.scale != nullptr ? src[i] / c.scale[i] : src[i]) / c.gain;
  };
  switch (c.dtype) {
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp8_e4m3(scaled(i));
      return;
    case DType::F8_E5M2:
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp8_e5m2(scaled(i));
      return;
    case DType::I8:
      for (int64_t i = 0; i < n; ++i) {
        const float q = std::nearbyint(scaled(i) + (c.offset != nullptr ? c.offset[i] : 0.0f));
        d[i] = uint8_t(int8_t(std::clamp(q, -128.0f, 127.0f)));
      }
      return;
    case DType::MXFP8:
      store_mxfp8_row(src, d, n);
      return;
    default:
      store_float_row(c.dtype, src, dst, n);
  }
}

void widen_cache_row(const CacheRowCodec& c, const uint8_t* src, float* dst, int n) {
  if (quantized_kv_cache(c.dtype)) {
    widen_quantized_row(c, src, dst, n);
    return;
  }
  int i = 0;
  if (c.dtype == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
    i = n;
  } else {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    if (c.dtype == DType::F16) {
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

void widen_cache_rows(const CacheRowCodec& c, const uint8_t* const* src, int count, float* dst,
                      int64_t dst_stride, int n) {
  if (c.dtype != DType::F16 || n % 8 != 0) {
    for (int r = 0; r < count; ++r) widen_cache_row(c, src[r], dst + r * dst_stride, n);
    return;
  }
  for (int r = 0; r < count; ++r) {
    const auto* h = reinterpret_cast<const __m128i*>(src[r]);
    float* d = dst + r * dst_stride;
    for (int i = 0; i < n / 8; ++i)
      _mm256_storeu_ps(d + 8 * i, _mm256_cvtph_ps(_mm_loadu_si128(h + i)));
  }
}

}  // namespace kestrel::cpu
