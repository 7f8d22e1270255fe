// AVX-512 round_to and silu_mul (ops.h): simd_math_avx512.h's sixteen-lane twins of the AVX2
// operations, so results equal the AVX2 path bit for bit; the last few elements go through it.
#include "backend/cpu/ops.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)

#include <immintrin.h>

#include "backend/cpu/simd_math_avx512.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {

bool round_to_avx512(DType dt, float* x, int64_t n) {
  if (dt != DType::BF16 && dt != DType::F16) return false;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, simd512::round_to16(dt, _mm512_loadu_ps(x + i)));
  round_to(dt, x + i, n - i);
  return true;
}

bool silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n, DType act) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = simd512::round_to16(act, _mm512_loadu_ps(gate + i));
    const __m512 u = simd512::round_to16(act, _mm512_loadu_ps(up + i));
    const __m512 e = simd512::exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = simd512::round_to16(act, _mm512_div_ps(g, _mm512_add_ps(one, e)));
    _mm512_storeu_ps(out + i, simd512::round_to16(act, _mm512_mul_ps(s, u)));
  }
  silu_mul(gate + i, up + i, out + i, n - i, act);
  return true;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
bool round_to_avx512(DType, float*, int64_t) {
  return false;
}
bool silu_mul_avx512(const float*, const float*, float*, int64_t, DType) {
  return false;
}
}  // namespace kestrel::cpu

#endif
