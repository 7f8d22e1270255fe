// AVX-512 VNNI kernels over packed weights (layout in packed_matmul.h): per group of up to sixteen
// blocks, its 64-code steps go through _mm512_dpbusd_epi32 into one integer vector per activation
// row (each lane sums one block), and the group's scales are applied once. Same compile-flag
// rules as matmul_avx512.cc: intrinsics and unnamed-namespace code only (so the group-size rule
// of packed_matmul.h is restated here rather than called).
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

// kLaneBlock[i][lane]: the block owning `lane` in a group of 8 >> i blocks (8, 4, 2).
alignas(64) constexpr int32_t kLaneBlock[3][16] = {
    {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7},
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}};

// Blocks of the group starting at `first` (packed_group_blocks).
inline int group_blocks(int64_t nb, int64_t first) {
  const int64_t left = nb - first;
  return left >= 16 ? 16 : left >= 8 ? 8 : left >= 4 ? 4 : 2;
}

// The group's f16 weight scales, one per lane.
inline __m512 group_scales(const uint16_t* d, int g) {
  if (g == 16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)));
  const __m512 v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(__mmask16((1u << g) - 1), d));
  const int table = g == 8 ? 0 : g == 4 ? 1 : 2;
  return _mm512_permutexvar_ps(_mm512_load_si512(kLaneBlock[table]), v);
}

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

// isum[r] += the integer products of one group's S steps: weight codes at wg, activation codes
// at byte xo of each row.
template <bool kNibbles, int S, int NX>
__attribute__((always_inline)) inline void group_dot(const uint8_t* wg, const uint8_t* const* xr,
                                                     int64_t xo, __m512i* isum) {
  const __m512i low4 = _mm512_set1_epi8(0xF);
  if constexpr (kNibbles && S == 1) {
    // 32 bytes: low nibbles are codes 0..31, high nibbles codes 32..63.
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i v =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg)));
    const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), low4);
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r)
      isum[r] = _mm512_dpbusd_epi32(isum[r], u, _mm512_loadu_si512(xr[r] + xo));
  } else if constexpr (kNibbles) {
#pragma GCC unroll 4
    for (int t = 0; t < S / 2; ++t) {
      const __m512i v = _mm512_loadu_si512(wg + 64 * t);
      const __m512i u0 = _mm512_and_si512(v, low4);
      const __m512i u1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        isum[r] = _mm512_dpbusd_epi32(isum[r], u0, _mm512_loadu_si512(xr[r] + xo + 128 * t));
        isum[r] = _mm512_dpbusd_epi32(isum[r], u1, _mm512_loadu_si512(xr[r] + xo + 128 * t + 64));
      }
    }
  } else {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const __m512i u = _mm512_loadu_si512(wg + 64 * s);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r)
        isum[r] = _mm512_dpbusd_epi32(isum[r], u, _mm512_loadu_si512(xr[r] + xo + 64 * s));
    }
  }
}

// Per output: Σ over groups (in order) of cvt(integer lane sums) · d_x · d_w, then Σ over chunks
// of sixteen blocks of m_w · s, all in one vector reduced at the end. No step depends on how many
// rows share the call.
template <bool kNibbles, Min kMin>
struct PackedDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const int64_t nb = k / 32;
    const auto* wc = static_cast<const uint8_t*>(w);
    const auto* wd = reinterpret_cast<const uint16_t*>(wc + (kNibbles ? k / 2 : k));
    const uint16_t* wm = wd + nb;
    const uint8_t* xr[NX];
    __m512 acc[NX];
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      xr[r] = static_cast<const uint8_t*>(x) + size_t(r) * xs;
      acc[r] = _mm512_setzero_ps();
    }
    int64_t xo = 0;  // the group's offset in an activation row
    for (int64_t first = 0; first < nb;) {
      const int g = group_blocks(nb, first);
      __m512i isum[NX];
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) isum[r] = _mm512_setzero_si512();
      switch (g) {
        case 16:
          group_dot<kNibbles, 8, NX>(wc, xr, xo, isum);
          break;
        case 8:
          group_dot<kNibbles, 4, NX>(wc, xr, xo, isum);
          break;
        case 4:
          group_dot<kNibbles, 2, NX>(wc, xr, xo, isum);
          break;
        default:
          group_dot<kNibbles, 1, NX>(wc, xr, xo, isum);
      }
      const __m512 dw = group_scales(wd + first, g);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        const __m512 dx = _mm512_loadu_ps(reinterpret_cast<const float*>(xr[r] + xo + 32 * g));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum[r]), dx), dw, acc[r]);
      }
      wc += kNibbles ? 16 * g : 32 * g;
      xo += 32 * g + 64;
      first += g;
    }
    for (int64_t c = 0; c < nb; c += 16) {
      const auto mask = __mmask16(nb - c >= 16 ? 0xFFFF : (1u << (nb - c)) - 1);
      __m512 mw;
      if constexpr (kMin == Min::kStored) {
        mw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wm + c));
      } else {
        mw = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wd + c)),
                           _mm512_set1_ps(kMin == Min::kMinus8D ? -8.0f : -128.0f));
      }
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        const auto* sums = reinterpret_cast<const float*>(xr[r] + xo);
        acc[r] = _mm512_fmadd_ps(mw, _mm512_maskz_loadu_ps(mask, sums + c), acc[r]);
      }
    }
    __m512 sums[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) sums[r] = r < NX ? acc[r] : _mm512_setzero_ps();
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
