// AVX-512 round_to (ops.h): the same roundings as simd::round_to8, sixteen lanes at a time —
// bf16 with integer round-to-nearest-even and NaNs made quiet as f32_to_bf16 does, f16 through
// the F16C conversions — so results equal the AVX2 path bit for bit.
#include "backend/cpu/ops.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {

bool round_to_avx512(DType dt, float* x, int64_t n) {
  if (dt != DType::BF16 && dt != DType::F16) return false;
  int64_t i = 0;
  if (dt == DType::BF16) {
    const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
    const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    const __m512i quiet_bit = _mm512_set1_epi32(0x00400000);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      const __m512i u = _mm512_castps_si512(v);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
      const __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(lsb, bias)), high);
      const __m512i quiet = _mm512_or_si512(_mm512_and_si512(u, high), quiet_bit);
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, r, quiet)));
    }
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(
          x + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
  round_to(dt, x + i, n - i);  // the last few through the AVX2 path
  return true;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
bool round_to_avx512(DType, float*, int64_t) {
  return false;
}
}  // namespace kestrel::cpu

#endif
