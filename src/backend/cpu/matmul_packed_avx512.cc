// AVX-512 VNNI kernels over packed weights (layout in packed_matmul.h): per group of up to sixteen
// blocks, its 64-code steps go through _mm512_dpbusd_epi32 into one integer vector per activation
// row (each lane sums one block), and the group's scales are applied once. Same compile-flag
// rules as matmul_avx512.cc: intrinsics and unnamed-namespace code only (so the group-size rule
// of packed_matmul.h is restated here rather than called).
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

#include <immintrin.h>

#include "backend/cpu/tile_sums_avx512.h"

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

// Where a block's m comes from: stored (Q4_1), or -8d (Q4_0) / -128d (Q8_0).
enum class Min { kStored, kMinus8D, kMinus128D };

// An activation vector pinned to a register: without this GCC folds the load into every VNNI
// instruction that reads it, loading it once per weight row instead of once.
__attribute__((always_inline)) inline __m512i load_act(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  __asm__("" : "+v"(v));
  return v;
}

// isum[n][r] += the integer products of one group's S steps: weight row n's codes at wg[n],
// activation codes at byte xo of each row.
template <bool kNibbles, int S, int NW, int NX>
__attribute__((always_inline)) inline void group_dot(const uint8_t* const* wg,
                                                     const uint8_t* const* xr, int64_t xo,
                                                     __m512i (*isum)[NX]) {
  const __m512i low4 = _mm512_set1_epi8(0xF);
  if constexpr (kNibbles && S == 1) {
    // 32 bytes: low nibbles are codes 0..31, high nibbles codes 32..63.
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i u[NW];
#pragma GCC unroll 4
    for (int n = 0; n < NW; ++n) {
      const __m512i v =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg[n])));
      u[n] = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), low4);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      const __m512i a = load_act(xr[r] + xo);
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) isum[n][r] = _mm512_dpbusd_epi32(isum[n][r], u[n], a);
    }
  } else if constexpr (kNibbles) {
#pragma GCC unroll 4
    for (int t = 0; t < S / 2; ++t) {
      __m512i u0[NW], u1[NW];
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) {
        const __m512i v = _mm512_loadu_si512(wg[n] + 64 * t);
        u0[n] = _mm512_and_si512(v, low4);
        u1[n] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        const __m512i a0 = load_act(xr[r] + xo + 128 * t);
#pragma GCC unroll 4
        for (int n = 0; n < NW; ++n) isum[n][r] = _mm512_dpbusd_epi32(isum[n][r], u0[n], a0);
        const __m512i a1 = load_act(xr[r] + xo + 128 * t + 64);
#pragma GCC unroll 4
        for (int n = 0; n < NW; ++n) isum[n][r] = _mm512_dpbusd_epi32(isum[n][r], u1[n], a1);
      }
    }
  } else {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      __m512i u[NW];
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) u[n] = _mm512_loadu_si512(wg[n] + 64 * s);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        const __m512i a = load_act(xr[r] + xo + 64 * s);
#pragma GCC unroll 4
        for (int n = 0; n < NW; ++n) isum[n][r] = _mm512_dpbusd_epi32(isum[n][r], u[n], a);
      }
    }
  }
}

// Weight rows per call for NX activation rows: NW·NX integer and NW·NX float accumulators fit
// the registers, and each activation load feeds NW VNNI instructions (the kernel was bound by
// those loads with one weight row). At one or two rows, more weight rows also give more
// independent VNNI chains.
constexpr int packed_weight_rows(int nx) {
  return nx <= 2 ? 4 : 2;
}

// Per output: Σ over groups (in order) of cvt(integer lane sums) · d_x · d_w, then Σ over chunks
// of sixteen blocks of m_w · s, all in one vector reduced at the end. No step depends on how many
// rows, weight or activation, share the call.
template <bool kNibbles, Min kMin>
struct PackedDot {
  template <int NW, int NX>
  static void tile(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t k, float* out,
                   int64_t os) {
    const int64_t nb = k / 32;
    const uint8_t* wc[NW];
    const uint16_t *wd[NW], *wm[NW];
#pragma GCC unroll 4
    for (int n = 0; n < NW; ++n) {
      wc[n] = w + size_t(n) * ws;
      wd[n] = reinterpret_cast<const uint16_t*>(wc[n] + (kNibbles ? k / 2 : k));
      wm[n] = wd[n] + nb;
    }
    const uint8_t* xr[NX];
    __m512 acc[NW][NX];
#pragma GCC unroll 8
    for (int r = 0; r < NX; ++r) {
      xr[r] = x + size_t(r) * xs;
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) acc[n][r] = _mm512_setzero_ps();
    }
    int64_t xo = 0;  // the group's offset in an activation row
    for (int64_t first = 0; first < nb;) {
      const int g = group_blocks(nb, first);
      __m512i isum[NW][NX];
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n)
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) isum[n][r] = _mm512_setzero_si512();
      switch (g) {
        case 16:
          group_dot<kNibbles, 8, NW, NX>(wc, xr, xo, isum);
          break;
        case 8:
          group_dot<kNibbles, 4, NW, NX>(wc, xr, xo, isum);
          break;
        case 4:
          group_dot<kNibbles, 2, NW, NX>(wc, xr, xo, isum);
          break;
        default:
          group_dot<kNibbles, 1, NW, NX>(wc, xr, xo, isum);
      }
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) {
        const __m512 dw = group_scales(wd[n] + first, g);
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) {
          const __m512 dx = _mm512_loadu_ps(reinterpret_cast<const float*>(xr[r] + xo + 32 * g));
          acc[n][r] =
              _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(isum[n][r]), dx), dw, acc[n][r]);
        }
        wc[n] += kNibbles ? 16 * g : 32 * g;
      }
      xo += 32 * g + 64;
      first += g;
    }
    for (int64_t c = 0; c < nb; c += 16) {
      const auto mask = __mmask16(nb - c >= 16 ? 0xFFFF : (1u << (nb - c)) - 1);
#pragma GCC unroll 4
      for (int n = 0; n < NW; ++n) {
        __m512 mw;
        if constexpr (kMin == Min::kStored) {
          mw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wm[n] + c));
        } else {
          mw = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, wd[n] + c)),
                             _mm512_set1_ps(kMin == Min::kMinus8D ? -8.0f : -128.0f));
        }
#pragma GCC unroll 8
        for (int r = 0; r < NX; ++r) {
          const auto* sums = reinterpret_cast<const float*>(xr[r] + xo);
          acc[n][r] = _mm512_fmadd_ps(mw, _mm512_maskz_loadu_ps(mask, sums + c), acc[n][r]);
        }
      }
    }
    avx512::store_tile_sums<8, NW, NX>(acc, out, os);
  }

  // nw weight rows against NX <= 8 activation rows: four activation rows at a time, in tiles of
  // packed_weight_rows weight rows, the last few one at a time.
  template <int NX>
  static void rows(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int64_t k,
                   float* out, int64_t os) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    if constexpr (NX > 4) {
      rows<4>(w, ws, nw, x, xs, k, out, os);
      rows<NX - 4>(w, ws, nw, xb + 4 * xs, xs, k, out + 4 * os, os);
    } else {
      constexpr int kNW = packed_weight_rows(NX);
      int64_t j = 0;
      for (; j + kNW <= nw; j += kNW)
        tile<kNW, NX>(wb + size_t(j) * ws, ws, xb, xs, k, out + j, os);
      for (; j < nw; ++j) tile<1, NX>(wb + size_t(j) * ws, ws, xb, xs, k, out + j, os);
    }
  }
};

constexpr PackedKernels kKernels = {dispatch_rows8<PackedDot<true, Min::kMinus8D>>,
                                    dispatch_rows8<PackedDot<true, Min::kStored>>,
                                    dispatch_rows8<PackedDot<false, Min::kMinus128D>>};

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
