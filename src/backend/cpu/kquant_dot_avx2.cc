// The AVX2 kernels of kquant_dot.h: eight weight rows at a time as the eight f32 lanes, so each
// super-block's two steps of every output are one lane of one fma, as in the scalar kernel. The
// integers c and m come from maddubs/madd (exact) per row and are reduced across the eight rows
// with hadd, which only adds integers. AVX-512 CPUs run these too.
#include "backend/cpu/kquant_dot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <algorithm>

#include "backend/cpu/matmul_x86_common.h"

namespace kestrel::cpu {
namespace {

constexpr int kLanes = 8;

// Q4_K / Q5_K: one row's c (eight partial lanes) against NX activation rows, and its m.
template <typename Block, bool kHighBit, int NX>
void kquant_block(const Block& blk, const BlockQ8_K* const* y, __m256i* c, __m256i* m) {
  KQuantCodes<Block, kHighBit> codes(blk);
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) c[r] = _mm256_setzero_si256();
  for (int q = 0; q < 4; ++q) {
    __m256i lo, hi;
    codes.chunk(blk, q, lo, hi);
    const __m256i s_lo = _mm256_set1_epi16(codes.sc[2 * q]),
                  s_hi = _mm256_set1_epi16(codes.sc[2 * q + 1]);
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      const int8_t* yq = y[r]->qs + 64 * q;
      const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(yq)), s_lo);
      const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(yq + 32)), s_hi);
      c[r] = _mm256_add_epi32(c[r], _mm256_add_epi32(p_lo, p_hi));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) m[r] = codes.mins(y[r]->bsums);
}

// Q6_K: unsigned 6-bit codes times y per 16-element sub-block, less the −32 offset applied once
// as 32·Σ_j sc_j·bsums_j: the same integer c as the signed codes give.
template <int NX>
void q6k_block(const BlockQ6_K& blk, const BlockQ8_K* const* y, __m256i* c) {
  const __m256i low4 = _mm256_set1_epi8(0xF), bits45 = _mm256_set1_epi8(0x30);
  const __m256i sc16 = _mm256_cvtepi8_epi16(load128(blk.scales));
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) c[r] = _mm256_setzero_si256();
  for (int n = 0; n < 2; ++n) {
    const __m256i ql0 = load256(blk.ql + 64 * n), ql1 = load256(blk.ql + 64 * n + 32);
    const __m256i qh = load256(blk.qh + 32 * n);
    // Elements 32g..32g+31 of this half; the high two bits sit at bits 2g, 2g+1 of qh.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, low4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
        _mm256_or_si256(_mm256_and_si256(ql1, low4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                        _mm256_and_si256(qh, bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)),
    };
    for (int g = 0; g < 4; ++g) {
      const int j = 8 * n + 2 * g;  // the two 16-element sub-blocks of this group
      const __m256i s =
          _mm256_set_m128i(_mm_set1_epi16(blk.scales[j + 1]), _mm_set1_epi16(blk.scales[j]));
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const __m256i yv = load256(y[r]->qs + 128 * n + 32 * g);
        c[r] = _mm256_add_epi32(c[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], yv), s));
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) c[r] = _mm256_sub_epi32(c[r], q6k_offset(y[r]->bsums, sc16));
}

// Weight rows [0, valid) of the eight at w (the missing lanes repeat the last row and are not
// stored) against NX activation rows.
template <DType T, int NX>
void eight_rows(const uint8_t* w, size_t ws, int valid, const uint8_t* x, size_t xs, int64_t nb,
                float* out, int64_t os) {
  using Block = std::conditional_t<T == DType::Q4_K, BlockQ4_K,
                                   std::conditional_t<T == DType::Q5_K, BlockQ5_K, BlockQ6_K>>;
  constexpr bool kMin = T != DType::Q6_K;
  const Block* rows[kLanes];
#pragma GCC unroll 8
  for (int i = 0; i < kLanes; ++i)
    rows[i] = reinterpret_cast<const Block*>(w + size_t(i < valid ? i : valid - 1) * ws);
  const BlockQ8_K* xr[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) {
    xr[r] = reinterpret_cast<const BlockQ8_K*>(x + size_t(r) * xs);
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_K* y[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) y[r] = xr[r] + b;
    __m256i c[NX][kLanes], m[NX][kLanes];
    alignas(32) float dv[kLanes], dminv[kLanes];
#pragma GCC unroll 8
    for (int i = 0; i < kLanes; ++i) {
      const Block& blk = rows[i][b];
      __m256i ci[NX], mi[NX];
      if constexpr (T == DType::Q6_K) {
        q6k_block<NX>(blk, y, ci);
      } else {
        kquant_block<Block, T == DType::Q5_K, NX>(blk, y, ci, mi);
        dminv[i] = f16(blk.dmin);
      }
      dv[i] = f16(blk.d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        c[r][i] = ci[r];
        if constexpr (kMin) m[r][i] = mi[r];
      }
    }
    const __m256 dw = _mm256_load_ps(dv);
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      const __m256 yd = _mm256_set1_ps(y[r]->d);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(c[r])), _mm256_mul_ps(dw, yd), acc[r]);
      if constexpr (kMin) {
        const __m256i neg_m = _mm256_sub_epi32(_mm256_setzero_si256(), reduce8(m[r]));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(neg_m),
                                 _mm256_mul_ps(_mm256_load_ps(dminv), yd), acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) store_lanes(out + r * os, acc[r], valid);
}

template <DType T>
void rows_dot(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx, int64_t k,
              float* out, int64_t os) {
  static constexpr EightRowsFn kRows[kMaxTileRows] = {eight_rows<T, 1>, eight_rows<T, 2>,
                                                      eight_rows<T, 3>, eight_rows<T, 4>};
  over_eight_rows(kRows, w, ws, nw, x, xs, nx, k / QK_K, out, os);
}

const KQuantKernels kAvx2{rows_dot<DType::Q4_K>, rows_dot<DType::Q5_K>, rows_dot<DType::Q6_K>,
                          kMaxTileRows};

}  // namespace

const KQuantKernels* avx2_kquant_kernels() {
  return &kAvx2;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const KQuantKernels* avx2_kquant_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
