// backend/cpu/simd_math_avx512.h — simd_math.h's exp and roundings on sixteen lanes, for the
// *_avx512.cc files only (they are compiled with AVX-512 flags). Each function does, lane by lane,
// exactly the operations of its eight-lane twin, so results equal the AVX2 path bit for bit.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__)

#include <immintrin.h>

#include "tensor/dtype.h"

namespace kestrel::cpu::simd512 {

// simd::exp8.
static inline __m512 exp16(__m512 x) {
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
  const __mmask16 too_big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.72283f)), _mm512_set1_ps(-87.33654f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i half = _mm512_srai_epi32(ni, 1);
  const __m512 s0 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(127)), 23));
  const __m512 s1 = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), _mm512_set1_epi32(127)), 23));
  const __m512 y =
      _mm512_maskz_mov_ps(_knot_mask16(too_small), _mm512_mul_ps(_mm512_mul_ps(p, s0), s1));
  return _mm512_mask_blend_ps(too_big, y, _mm512_set1_ps(__builtin_inff()));
}

// simd::round_to8: bf16 by integer round-to-nearest-even with NaNs made quiet, f16 through F16C.
static inline __m512 round_to16(DType dt, __m512 v) {
  if (dt == DType::BF16) {
    const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), high);
    const __m512i quiet = _mm512_or_si512(_mm512_and_si512(u, high), _mm512_set1_epi32(0x00400000));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, quiet));
  }
  if (dt == DType::F16)
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return v;
}

}  // namespace kestrel::cpu::simd512

#endif
