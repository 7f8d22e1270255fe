// AVX2 + FMA + F16C dot-product kernels. Integer paths use _mm256_maddubs_epi16 (unsigned x
// signed bytes -> int16 pairs) and _mm256_madd_epi16; signed weights go through the sign trick
// (|w| times y with w's sign). Every integer sum is exact; only the f32 accumulation order differs
// from the scalar kernels.
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "backend/cpu/matmul_x86_common.h"

namespace kestrel::cpu {
namespace {

// Eight int32 sums of q*y over groups of four bytes; q unsigned (< 128), y signed.
__m256i dot_u8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// Same for signed w, given aw = |w|: |w| * (y with w's sign).
__m256i dot_s8(__m256i aw, __m256i w, __m256i y) {
  return dot_u8(aw, _mm256_sign_epi8(y, w));
}

// ---- float weights ----

template <typename W>
struct FloatDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const float* xr[NX];
    __m256 a0[NX], a1[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<float>(x, xs, r);
      a0[r] = a1[r] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m256 w0 = W::load8(w, i), w1 = W::load8(w, i + 8);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[r] + i), a0[r]);
        a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr[r] + i + 8), a1[r]);
      }
    }
    if (i + 8 <= k) {
      const __m256 w0 = W::load8(w, i);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[r] + i), a0[r]);
      i += 8;
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      float s = hsum256(_mm256_add_ps(a0[r], a1[r]));
      for (int64_t j = i; j < k; ++j) s += W::at(w, j) * xr[r][j];
      out[r * os] = s;
    }
  }
};

// ---- 32-element blocks against Q8_0 (signed weight codes) ----

template <typename W>
struct SymDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    const BlockQ8_0* xr[NX];
    __m256 acc[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_0>(x, xs, r);
      acc[r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < k / QK; ++b) {
      const __m256i q = W::codes(wb[b]);
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float dw = f16(wb[b].d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_0& y = xr[r][b];
        const __m256 p = _mm256_cvtepi32_ps(dot_s8(aq, q, load256(y.qs)));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * f16(y.d)), acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum256(acc[r]);
  }
};

// ---- 32-element blocks with a min against Q8_1 ----

template <typename W>
struct MinDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    const BlockQ8_1* xr[NX];
    __m256 acc[NX];
    float mins[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_1>(x, xs, r);
      acc[r] = _mm256_setzero_ps();
      mins[r] = 0.0f;
    }
    for (int64_t b = 0; b < k / QK; ++b) {
      const __m256i q = W::codes(wb[b]);
      const float dw = f16(wb[b].d), mw = f16(wb[b].m);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_1& y = xr[r][b];
        const __m256 p = _mm256_cvtepi32_ps(dot_u8(q, load256(y.qs)));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * f16(y.d)), acc[r]);
        mins[r] += mw * f16(y.s);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum256(acc[r]) + mins[r];
  }
};

// ---- K-quants against Q8_K ----

// Q4_K / Q5_K: the sub-blocks of chunk c (see KQuantCodes) against 64 bytes of y.
template <typename Block, bool kHighBit>
struct KQuantDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const Block*>(w);
    const BlockQ8_K* xr[NX];
    __m256 acc[NX], acc_min[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_K>(x, xs, r);
      acc[r] = acc_min[r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const Block& blk = wb[b];
      KQuantCodes<Block, kHighBit> codes(blk);
      __m256i isum[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) isum[r] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        codes.chunk(blk, c, lo, hi);
        const __m256i s_lo = _mm256_set1_epi16(codes.sc[2 * c]),
                      s_hi = _mm256_set1_epi16(codes.sc[2 * c + 1]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) {
          const int8_t* yq = xr[r][b].qs + 64 * c;
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(yq)), s_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(yq + 32)), s_hi);
          isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float dw = f16(blk.d), dminw = f16(blk.dmin);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = xr[r][b];
        const __m256i m = codes.mins(y.bsums);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(dw * y.d), acc[r]);
        acc_min[r] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dminw * y.d), acc_min[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum256(acc[r]) - hsum256(acc_min[r]);
  }
};

// Q6_K: unsigned 6-bit codes times y, scaled per 16-element sub-block; the -32 offset is
// applied once per super-block as 32 * sum_j sc_j * bsums_j.
struct Q6KDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const BlockQ6_K*>(w);
    const BlockQ8_K* xr[NX];
    __m256 acc[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_K>(x, xs, r);
      acc[r] = _mm256_setzero_ps();
    }
    const __m256i low4 = _mm256_set1_epi8(0xF), bits45 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const BlockQ6_K& blk = wb[b];
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(blk.scales));
      __m256i isum[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) isum[r] = _mm256_setzero_si256();
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
            const __m256i yv = load256(xr[r][b].qs + 128 * n + 32 * g);
            isum[r] =
                _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], yv), s));
          }
        }
      }
      const float dw = f16(blk.d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = xr[r][b];
        const __m256i offset = q6k_offset(y.bsums, sc16);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], offset));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * y.d), acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum256(acc[r]);
  }
};

constexpr DotKernels kAvx2Kernels = make_dot_kernels<FloatDot, SymDot, MinDot, KQuantDot, Q6KDot>();

}  // namespace

const DotKernels* avx2_dot_kernels() {
  return &kAvx2Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const DotKernels* avx2_dot_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
