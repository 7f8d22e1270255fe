// AVX-512 VNNI kernels over packed weights (layout in packed_matmul.h): per block pair one 64-byte code
// vector, one _mm512_dpbusd_epi32 per activation row, and the pair's f32 scales expanded from
// sixteen-block vectors by one permute. Same compile-flag rules as matmul_avx512.cc: intrinsics
// and unnamed-namespace code only.
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

// kPairIndex[j]: for the j-th pair of a sixteen-block chunk, lane i's block (2j or 2j + 1) in
// the element order b0[0..15], b1[0..15], b0[16..31], b1[16..31] (four bytes per lane).
#define KPAIR(j)                                                                                 \
  {                                                                                              \
    2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j, 2 * j, 2 * j, \
        2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1                                        \
  }
alignas(64) constexpr int32_t kPairIndex[8][16] = {KPAIR(0), KPAIR(1), KPAIR(2), KPAIR(3),
                                                   KPAIR(4), KPAIR(5), KPAIR(6), KPAIR(7)};
#undef KPAIR

// Per output: Σ over pairs (in order) of cvt(Σ u·q_x per lane) · d_x · d_w, accumulated in one
// vector; plus Σ over blocks of m_w · s, in another; each reduced at the end. No step depends on
// how many rows share the call.
template <bool kNibbles>
struct PackedDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const int64_t nb = k / 32, np = nb / 2;
    const auto* wc = static_cast<const uint8_t*>(w);
    const auto* wd = reinterpret_cast<const float*>(wc + np * (kNibbles ? 32 : 64));
    const float* wm = wd + nb;
    const uint8_t* xc[NX];
    const float* xd[NX];
    const float* xsum[NX];
    __m512 acc[NX], accm[NX];
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      xc[r] = static_cast<const uint8_t*>(x) + size_t(r) * xs;
      xd[r] = reinterpret_cast<const float*>(xc[r] + k);
      xsum[r] = xd[r] + np * 16;
      acc[r] = accm[r] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0xF);
    // Low 256 bits keep the low nibbles, high 256 bits get the high ones.
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    for (int64_t c = 0; c < nb; c += 16) {
      const int nbc = int(nb - c < 16 ? nb - c : 16);
      const auto mask = __mmask16((1u << nbc) - 1);
      const __m512 dw16 = _mm512_maskz_loadu_ps(mask, wd + c);
      const __m512 mw16 = _mm512_maskz_loadu_ps(mask, wm + c);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r)
        accm[r] = _mm512_fmadd_ps(mw16, _mm512_maskz_loadu_ps(mask, xsum[r] + c), accm[r]);
      for (int j = 0; j < nbc / 2; ++j) {
        const int64_t p = c / 2 + j;
        __m512i u;
        if constexpr (kNibbles) {
          const __m512i v = _mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wc + p * 32)));
          u = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), low4);
        } else {
          u = _mm512_loadu_si512(wc + p * 64);
        }
        const __m512 dwe = _mm512_permutexvar_ps(_mm512_load_si512(kPairIndex[j]), dw16);
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) {
          const __m512i isum =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(xc[r] + p * 64));
          const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_loadu_ps(xd[r] + p * 16));
          acc[r] = _mm512_fmadd_ps(t, dwe, acc[r]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r)
      out[r * os] = _mm512_reduce_add_ps(acc[r]) + _mm512_reduce_add_ps(accm[r]);
  }
};

template <typename K>
void dispatch8(const void* w, const void* x, size_t xs, int nx, int64_t k, float* out, int64_t os) {
  switch (nx) {
    case 1:
      return K::template run<1>(w, x, xs, k, out, os);
    case 2:
      return K::template run<2>(w, x, xs, k, out, os);
    case 3:
      return K::template run<3>(w, x, xs, k, out, os);
    case 4:
      return K::template run<4>(w, x, xs, k, out, os);
    case 5:
      return K::template run<5>(w, x, xs, k, out, os);
    case 6:
      return K::template run<6>(w, x, xs, k, out, os);
    case 7:
      return K::template run<7>(w, x, xs, k, out, os);
    default:
      return K::template run<8>(w, x, xs, k, out, os);
  }
}

static_assert(kMaxPackedTileRows == 8, "dispatch8 handles up to eight rows");

constexpr PackedKernels kKernels = {dispatch8<PackedDot<true>>, dispatch8<PackedDot<false>>};

}  // namespace

const PackedKernels* avx512_packed_kernels() {
  return &kKernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const PackedKernels* avx512_packed_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
