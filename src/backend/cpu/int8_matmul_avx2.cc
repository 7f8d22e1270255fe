// AVX2 int8 kernel: sixteen codes of a weight row and of each activation row widened to int16
// (the activation's + 128 removed), multiplied and pair-summed into int32 by vpmaddwd — exact
// (each pair at most 2 · 128 · 128), as vpmaddubsw's saturating int16 sums would not be; the
// columns past the last sixteen in scalar code. Four activation rows per call.
#include "backend/cpu/int8_matmul.h"

#if defined(__AVX2__)

#include <immintrin.h>

#include <cstring>

namespace kestrel::cpu {
namespace {

struct Int8DotAvx2 {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const Int8Row& row = *static_cast<const Int8Row*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    const uint8_t* xr[NX];
    __m256i acc[NX];
    for (int r = 0; r < NX; ++r) {
      xr[r] = xb + size_t(r) * xs + kInt8ActHeaderBytes;
      acc[r] = _mm256_setzero_si256();
    }
    const __m256i offset = _mm256_set1_epi16(128);
    int64_t c = 0;
    for (; c + 16 <= k; c += 16) {
      const __m256i wv =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.codes + c)));
      for (int r = 0; r < NX; ++r) {
        const __m256i xv = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xr[r] + c))),
            offset);
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(xv, wv));
      }
    }
    for (int r = 0; r < NX; ++r) {
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[r]);
      int32_t total = row.bias;
      for (int32_t v : lanes) total += v;
      for (int64_t i = c; i < k; ++i) total += (int32_t(xr[r][i]) - 128) * int32_t(row.codes[i]);
      float a;
      std::memcpy(&a, xb + size_t(r) * xs, sizeof a);
      out[r * os] = float(total) * a * row.scale;
    }
  }
};

constexpr Int8Kernels kAvx2Int8Kernels = {dispatch_tile<Int8DotAvx2>, kMaxTileRows};

}  // namespace

const Int8Kernels* avx2_int8_kernels() {
  return &kAvx2Int8Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Int8Kernels* avx2_int8_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
