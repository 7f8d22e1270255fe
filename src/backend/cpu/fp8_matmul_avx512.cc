// AVX-512 (F, BW, VL) FP8 kernel: sixteen codes become f16 bit patterns of value · 2^-8
// (fp8_e4m3_to_f16_scaled: a sign-extending widen, a shift and a mask), then f32 through
// vcvtph2ps; kFp8F16Scale is folded into each block's scale. Eight activation rows per call.
//
// This file is compiled with AVX-512 flags, so it must not create out-of-line code the linker
// could share with other files (an inline function or template of another header): it uses only
// intrinsics, its unnamed namespace and dispatch_tile8 instantiated with a type from it.
#include "backend/cpu/fp8_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

// GCC 12's AVX-512 headers build casts and extracts from a self-initialized "undefined" vector,
// which its own -Wuninitialized then reports (GCC PR105593, fixed in 12.3/13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "tensor/fp8.h"

namespace kestrel::cpu {
namespace {

// Sixteen codes sign-extended to int16 lanes -> f32 values · 2^-8: the shift puts e and m into
// f16's fields and the sign into bit 15; the mask clears the copy of the sign left in bit 14.
__m512 widen16(__m128i codes) {
  const __m256i s = _mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7);
  return _mm512_cvtph_ps(_mm256_and_si256(s, _mm256_set1_epi16(int16_t(0xBF80))));
}

__m128i load128(const uint8_t* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// Two accumulators per row within a block; a block's last partial group of sixteen is read with
// masked loads.
struct Fp8Dot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Fp8Row& row = *static_cast<const Fp8Row*>(w);
    const uint8_t* q = row.codes;
    const float* xr[NX];
    __m512 total[NX];
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      xr[r] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * xs);
      total[r] = _mm512_setzero_ps();
    }
    for (int64_t c0 = 0, b = 0; c0 < k; c0 += row.block_cols, ++b) {
      const int64_t c1 = k - c0 < row.block_cols ? k : c0 + row.block_cols;
      __m512 a0[NX], a1[NX];
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
      int64_t i = c0;
      for (; i + 32 <= c1; i += 32) {
        const __m512 w0 = widen16(load128(q + i)), w1 = widen16(load128(q + i + 16));
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) {
          a0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr[r] + i), a0[r]);
          a1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr[r] + i + 16), a1[r]);
        }
      }
      if (i + 16 <= c1) {
        const __m512 w0 = widen16(load128(q + i));
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) a0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr[r] + i), a0[r]);
        i += 16;
      }
      if (i < c1) {
        const __mmask16 m = __mmask16((1u << (c1 - i)) - 1);
        const __m512 wt = widen16(_mm_maskz_loadu_epi8(m, q + i));
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) {
          a1[r] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(m, xr[r] + i), a1[r]);
        }
      }
      const __m512 s = _mm512_set1_ps(row.scale[b] * kFp8F16Scale);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r)
        total[r] = _mm512_fmadd_ps(_mm512_add_ps(a0[r], a1[r]), s, total[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
  }
};

constexpr Fp8Kernels kAvx512Fp8Kernels = {dispatch_tile8<Fp8Dot>, kMaxWideTileRows};

}  // namespace

const Fp8Kernels* avx512_fp8_kernels() {
  return &kAvx512Fp8Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Fp8Kernels* avx512_fp8_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
