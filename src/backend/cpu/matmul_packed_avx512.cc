// AVX-512 VNNI kernels over packed weights (layout in packed_matmul.h): per block pair one 64-byte
// code vector, one _mm512_dpbusd_epi32 per activation row, and the pair's f32 scales expanded from
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

// Sums the lanes of each of v[0..7] and stores sum r at out[r * os] for r < nx. The lanes of one
// vector are added in a fixed tree whatever the other vectors hold, so a row's result does not
// depend on nx; eight rows share the shuffles.
__attribute__((always_inline)) inline void store_sums8(const __m512 v[8], int nx, float* out,
                                                       int64_t os) {
  __m512 t[4];
  for (int i = 0; i < 4; ++i) {
    // [a.q0 + a.q2, a.q1 + a.q3, b.q0 + b.q2, b.q1 + b.q3] for a = v[2i], b = v[2i + 1].
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 u[2];
  for (int i = 0; i < 2; ++i) {
    // Quarter q holds row 4i + q's four partial sums.
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    u[i] = _mm512_add_ps(u[i], _mm512_permute_ps(u[i], _MM_SHUFFLE(1, 0, 3, 2)));
    u[i] = _mm512_add_ps(u[i], _mm512_permute_ps(u[i], _MM_SHUFFLE(2, 3, 0, 1)));
  }
  alignas(64) float lanes[2][16];
  _mm512_store_ps(lanes[0], u[0]);
  _mm512_store_ps(lanes[1], u[1]);
  for (int r = 0; r < nx; ++r) out[r * os] = lanes[r / 4][4 * (r % 4)];
}

// Where a block's m comes from: stored (Q4_1), or -8d (Q4_0) / -128d (Q8_0).
enum class Min { kStored, kMinus8D, kMinus128D };

// Per output: Σ over pairs (in order) of cvt(Σ u·q_x per lane) · d_x · d_w, accumulated in one
// vector; plus Σ over blocks of m_w · s, in another; their sum reduced at the end. No step depends
// on how many rows share the call.
template <bool kNibbles, Min kMin>
struct PackedDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const int64_t nb = k / 32, np = nb / 2;
    const auto* wc = static_cast<const uint8_t*>(w);
    const auto* wd = reinterpret_cast<const uint16_t*>(wc + np * (kNibbles ? 32 : 64));
    const uint16_t* wm = wd + nb;
    // Per pair of an activation row: 64 codes, then 16 f32 lanes of d_x; the sums follow the pairs.
    constexpr int64_t kPairBytes = 64 + 16 * sizeof(float);
    const uint8_t* xr[NX];
    __m512 acc[NX], accm[NX];
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      xr[r] = static_cast<const uint8_t*>(x) + size_t(r) * xs;
      acc[r] = accm[r] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0xF);
    // Low 256 bits keep the low nibbles, high 256 bits get the high ones.
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    for (int64_t c = 0; c < nb; c += 16) {
      const int nbc = int(nb - c < 16 ? nb - c : 16);
      const auto mask = __mmask16((1u << nbc) - 1);
      const __m512 dw16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wd + c));
      __m512 mw16;
      if constexpr (kMin == Min::kStored) {
        mw16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wm + c));
      } else {
        mw16 = _mm512_mul_ps(dw16, _mm512_set1_ps(kMin == Min::kMinus8D ? -8.0f : -128.0f));
      }
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r)
        accm[r] =
            _mm512_fmadd_ps(mw16,
                            _mm512_maskz_loadu_ps(
                                mask, reinterpret_cast<const float*>(xr[r] + np * kPairBytes) + c),
                            accm[r]);
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
          const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                                   _mm512_loadu_si512(xr[r] + p * kPairBytes));
          const __m512 t = _mm512_mul_ps(
              _mm512_cvtepi32_ps(isum),
              _mm512_loadu_ps(reinterpret_cast<const float*>(xr[r] + p * kPairBytes + 64)));
          acc[r] = _mm512_fmadd_ps(t, dwe, acc[r]);
        }
      }
    }
    __m512 sums[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r)
      sums[r] = r < NX ? _mm512_add_ps(acc[r], accm[r]) : _mm512_setzero_ps();
    store_sums8(sums, NX, out, os);
  }
};

constexpr PackedKernels kKernels = {dispatch_tile8<PackedDot<true, Min::kMinus8D>>,
                                    dispatch_tile8<PackedDot<true, Min::kStored>>,
                                    dispatch_tile8<PackedDot<false, Min::kMinus128D>>};

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
