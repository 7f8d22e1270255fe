// backend/cpu/simd_math.h — eight-lane f32 helpers on the build baseline (AVX2, FMA, F16C):
// exp, rounding to f16/bf16 as the scalar converters do, and sum reductions in a fixed order.
//
// Include only from files compiled with the baseline flags (not the *_avx512.cc kernels): the
// functions are static so no copy is shared across files.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace kestrel::cpu::simd {

// e^x, |relative error| < 2e-7 over the range where the result is a normal f32; x below
// -87.33 gives 0 (softmax's masked lanes are -inf), above 88.72 gives +inf. Cephes' expf
// polynomial after x = n·ln2 + r.
static inline __m256 exp8(__m256 x) {
  const __m256 too_small = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __m256 too_big = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283f), _CMP_GT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.72283f)), _mm256_set1_ps(-87.33654f));
  const __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n is in [-126, 128]; 2^n in two factors so that n = 128 does not overflow the exponent.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s0 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s1 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s0), s1);
  y = _mm256_andnot_ps(too_small, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), too_big);
}

// Round to f16 and back (round to nearest even, as f32_to_f16).
static inline __m256 round_f16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Round to bf16 and back (round to nearest even; NaN becomes the quiet NaN f32_to_bf16 makes).
static inline __m256 round_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  r = _mm256_and_si256(r, high);
  const __m256i quiet = _mm256_or_si256(_mm256_and_si256(u, high), _mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(quiet), nan);
}

static inline __m256 round_to8(DType dt, __m256 x) {
  if (dt == DType::BF16) return round_bf16(x);
  if (dt == DType::F16) return round_f16(x);
  return x;
}

// Sum of the eight lanes, always in the same order.
static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i of the result = sum of the lanes of a[i].
static inline __m256 hsum8x8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Eight attention scores from their keys' eight-lane partial dot products: summed by hsum8x8,
// rounded to act, scaled, rounded again (paged_attention.h's precision rules), stored. Every
// attention kernel finishes its scores here, so they all round alike.
static inline void store_scores8(const __m256 partial[8], float scale, DType act, float* out) {
  const __m256 sc = round_to8(act, hsum8x8(partial));
  _mm256_storeu_ps(out, round_to8(act, _mm256_mul_ps(sc, _mm256_set1_ps(scale))));
}

}  // namespace kestrel::cpu::simd
