// AVX-512 VNNI int8 kernel: per 64 columns one vpdpbusd per activation row (its u8 codes q + 128
// times the weight's s8 codes) and one more against ones for the weight's column sum, which
// removes the +128: Σ q·w = Σ (q + 128)·w − 128·Σ w. The last, partial 64 columns load the
// weight masked to zero. Eight activation rows per call.
//
// This file is compiled with AVX-512 flags, so it must not create out-of-line code the linker
// could share with other files (an inline function or template of another header): it uses only
// intrinsics, its unnamed namespace and dispatch_tile8 instantiated with a type from it.
#include "backend/cpu/int8_matmul.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

// GCC 12's AVX-512 headers build casts and extracts from a self-initialized "undefined" vector,
// which its own -Wuninitialized then reports (GCC PR105593, fixed in 12.3/13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kestrel::cpu {
namespace {

struct Int8DotVnni {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Int8Row& row = *static_cast<const Int8Row*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    __m512i acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_si512();
    __m512i wsum = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < k; c += 64) {
      const __mmask64 m = k - c >= 64 ? ~__mmask64(0) : (__mmask64(1) << (k - c)) - 1;
      const __m512i wv = _mm512_maskz_loadu_epi8(m, row.codes + c);
      wsum = _mm512_dpbusd_epi32(wsum, ones, wv);
      for (int r = 0; r < NX; ++r) {
        const __m512i xv =
            _mm512_loadu_si512(xb + size_t(r) * xs + kInt8ActHeaderBytes + size_t(c));
        acc[r] = _mm512_dpbusd_epi32(acc[r], xv, wv);
      }
    }
    const int32_t correction = 128 * _mm512_reduce_add_epi32(wsum);
    for (int r = 0; r < NX; ++r) {
      float a;
      __builtin_memcpy(&a, xb + size_t(r) * xs, sizeof a);
      const int32_t total = _mm512_reduce_add_epi32(acc[r]) - correction + row.bias;
      out[r * os] = float(total) * a * row.scale;
    }
  }
};

constexpr Int8Kernels kAvx512Int8Kernels = {dispatch_tile8<Int8DotVnni>, kMaxWideTileRows};

}  // namespace

const Int8Kernels* avx512_int8_kernels() {
  return &kAvx512Int8Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Int8Kernels* avx512_int8_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
