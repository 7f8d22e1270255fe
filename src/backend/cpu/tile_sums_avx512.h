// backend/cpu/tile_sums_avx512.h — the horizontal sums that finish an AVX-512 kernel tile.
//
// Include only from files compiled with the AVX-512 flags (*_avx512.cc): the functions are
// static, so each file keeps its own copy and the linker never picks one built for another ISA.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kestrel::cpu::avx512 {

// The lane sums of sixteen vectors, every one by the same tree (lanes i + i+8, then i + i+4,
// i + i+2, i + i+1), so an output's value does not depend on its slot. Lane 4 * (t % 4) + t / 4
// of the result holds the sum of v[t]. About three shuffles or adds per sum instead of ten.
static inline __m512 hsum16x16(const __m512 (&v)[16]) {
  __m512 a[8], b[4], c[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // 256-bit halves: [v2i lo+hi, v2i+1 lo+hi]
    a[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit quarters: quarter q holds v[4i + q]
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // pairs within each quarter
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The lane sums of eight vectors in lanes[4 * t] (lanes: 32 floats), each by one fixed tree;
// half the work of hsum16x16 when a tile has only eight outputs.
static inline __attribute__((always_inline)) void hsum8x16(const __m512 (&v)[8], float* lanes) {
  __m512 t[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // [a.q0 + a.q2, a.q1 + a.q3, b.q0 + b.q2, b.q1 + b.q3]
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // quarter q holds vector 4i + q's four partial sums
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
    _mm512_storeu_ps(lanes + 16 * i, u);
  }
}

// out[r * os + n] = the lane sum of acc[n][r] for a tile of NW weight rows x NX activation rows,
// kGroup (8 or 16) outputs per reduction. A kernel family keeps one kGroup for all its tiles, so
// every output goes through the same tree whatever tile it lands in.
template <int kGroup, int NW, int NX>
static inline __attribute__((always_inline)) void store_tile_sums(const __m512 (&acc)[NW][NX],
                                                                  float* out, int64_t os) {
  static_assert(kGroup == 8 || kGroup == 16);
  constexpr int kOut = NW * NX;  // outputs in order n * NX + r
#pragma GCC unroll 3
  for (int g = 0; g < kOut; g += kGroup) {
    __m512 v[kGroup];
#pragma GCC unroll 16
    for (int t = 0; t < kGroup; ++t)
      v[t] = g + t < kOut ? acc[(g + t) / NX][(g + t) % NX] : _mm512_setzero_ps();
    alignas(64) float lanes[32];
    if constexpr (kGroup == 16) {
      _mm512_store_ps(lanes, hsum16x16(v));
    } else {
      hsum8x16(v, lanes);
    }
    for (int t = 0; t < kGroup && g + t < kOut; ++t)
      out[(g + t) % NX * os + (g + t) / NX] = lanes[kGroup == 16 ? 4 * (t % 4) + t / 4 : 4 * t];
  }
}

}  // namespace kestrel::cpu::avx512
