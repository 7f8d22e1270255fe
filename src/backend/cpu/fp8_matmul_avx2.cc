// AVX2 + FMA + F16C FP8 kernel. Codes become f16 bit patterns of value · 2^-8
// (fp8_e4m3_to_f16_scaled: a sign-extending widen, a shift and a mask), then f32 through
// vcvtph2ps; the 2^-8 is undone by folding kFp8F16Scale into each block's scale.
#include "backend/cpu/fp8_matmul.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// Codes sign-extended to int16 lanes -> f16 bits: the shift puts e and m into f16's fields and
// the sign into bit 15; the mask clears the copy of the sign the shift left in bit 14.
__m256i f16_bits(__m256i s16) {
  return _mm256_and_si256(_mm256_slli_epi16(s16, 7), _mm256_set1_epi16(int16_t(0xBF80)));
}
__m128i f16_bits(__m128i s16) {
  return _mm_and_si128(_mm_slli_epi16(s16, 7), _mm_set1_epi16(int16_t(0xBF80)));
}

// Sixteen codes as two vectors of eight values · 2^-8.
void widen16(const uint8_t* q, __m256& lo, __m256& hi) {
  const __m256i h =
      f16_bits(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Eight codes.
__m256 widen8(const uint8_t* q) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  return _mm256_cvtph_ps(f16_bits(_mm_cvtepi8_epi16(c)));
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Two accumulators per row within a block; a block's last partial group of eight goes through a
// zero-padded copy of its codes and masked activation loads.
struct Fp8Dot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Fp8Row& row = *static_cast<const Fp8Row*>(w);
    const uint8_t* q = row.codes;
    const float* xr[NX];
    __m256 total[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
      total[r] = _mm256_setzero_ps();
    }
    for (int64_t c0 = 0, b = 0; c0 < k; c0 += row.block_cols, ++b) {
      const int64_t c1 = std::min(k, c0 + row.block_cols);
      __m256 a0[NX], a1[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
      int64_t i = c0;
      for (; i + 16 <= c1; i += 16) {
        __m256 w0, w1;
        widen16(q + i, w0, w1);
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) {
          a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[r] + i), a0[r]);
          a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr[r] + i + 8), a1[r]);
        }
      }
      if (i + 8 <= c1) {
        const __m256 w0 = widen8(q + i);
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[r] + i), a0[r]);
        i += 8;
      }
      if (i < c1) {
        const int n = int(c1 - i);
        uint8_t codes[8] = {};
        std::memcpy(codes, q + i, size_t(n));
        const __m256 wt = widen8(codes);
        const __m256i m =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) {
          a1[r] = _mm256_fmadd_ps(wt, _mm256_maskload_ps(xr[r] + i, m), a1[r]);
        }
      }
      const __m256 s = _mm256_set1_ps(row.scale[b] * kFp8F16Scale);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r)
        total[r] = _mm256_fmadd_ps(_mm256_add_ps(a0[r], a1[r]), s, total[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum(total[r]);
  }
};

constexpr Fp8Kernels kAvx2Fp8Kernels = {dispatch_tile<Fp8Dot>, kMaxTileRows};

}  // namespace

const Fp8Kernels* avx2_fp8_kernels() {
  return &kAvx2Fp8Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Fp8Kernels* avx2_fp8_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
