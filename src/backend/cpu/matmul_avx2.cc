// AVX2 + FMA + F16C dot-product kernels. Integer paths use _mm256_maddubs_epi16 (unsigned x
// signed bytes -> int16 pairs) and _mm256_madd_epi16; signed weights go through the sign trick
// (|w| times y with w's sign). Every integer sum is exact; only the f32 accumulation order differs
// from the scalar kernels.
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kscales.h"

namespace kestrel::cpu {
namespace {

template <typename T>
const T* row(const void* x, size_t stride, int r) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + size_t(r) * stride);
}

float f16(uint16_t h) {
  return _cvtsh_ss(h);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
__m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// Eight int32 sums of q*y over groups of four bytes; q unsigned (< 128), y signed.
__m256i dot_u8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// Same for signed w, given aw = |w|: |w| * (y with w's sign).
__m256i dot_s8(__m256i aw, __m256i w, __m256i y) {
  return dot_u8(aw, _mm256_sign_epi8(y, w));
}

// The 32 codes of a 16-byte nibble array: low nibbles (elements 0..15), then high nibbles.
__m256i nibbles32(const uint8_t* qs) {
  const __m128i v = load128(qs), m = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte j = 0x10 where bit j of bits is set: the fifth bit of Q5_0 / Q5_1 codes.
__m256i bits_to_0x10(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), spread);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- float weights ----

struct F32W {
  static __m256 load8(const void* w, int64_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  }
  static float at(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};
struct F16W {
  static __m256 load8(const void* w, int64_t i) {
    return _mm256_cvtph_ps(load128(static_cast<const uint16_t*>(w) + i));
  }
  static float at(const void* w, int64_t i) { return f16(static_cast<const uint16_t*>(w)[i]); }
};
struct BF16W {
  static __m256 load8(const void* w, int64_t i) {
    const __m256i v = _mm256_cvtepu16_epi32(load128(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float at(const void* w, int64_t i) {
    const uint32_t u = uint32_t(static_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

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
      float s = hsum(_mm256_add_ps(a0[r], a1[r]));
      for (int64_t j = i; j < k; ++j) s += W::at(w, j) * xr[r][j];
      out[r * os] = s;
    }
  }
};

// ---- 32-element blocks against Q8_0 (signed weight codes) ----

struct Q4_0W {
  using Block = BlockQ4_0;
  static __m256i codes(const Block& b) {
    return _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8));
  }
};
struct Q5_0W {
  using Block = BlockQ5_0;
  static __m256i codes(const Block& b) {
    const __m256i q = _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(load_u32(b.qh)));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
  }
};
struct Q8_0W {
  using Block = BlockQ8_0;
  static __m256i codes(const Block& b) { return load256(b.qs); }
};

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
    for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]);
  }
};

// ---- 32-element blocks with a min against Q8_1 ----

struct Q4_1W {
  using Block = BlockQ4_1;
  static __m256i codes(const Block& b) { return nibbles32(b.qs); }
};
struct Q5_1W {
  using Block = BlockQ5_1;
  static __m256i codes(const Block& b) {
    return _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(load_u32(b.qh)));
  }
};

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
    for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]) + mins[r];
  }
};

// ---- K-quants against Q8_K ----

// Q4_K / Q5_K: chunk c (64 elements) holds sub-blocks 2c (low nibbles) and 2c+1 (high).
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
    const __m256i low4 = _mm256_set1_epi8(0xF);
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const Block& blk = wb[b];
      uint8_t sc[8], mn[8];
      unpack_k_scales(blk.scales, sc, mn);
      const __m128i mn8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
      // mn_j once for each of the two bsums of sub-block j.
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kHighBit) hbits = load256(blk.qh);
      __m256i isum[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) isum[r] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load256(blk.qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (kHighBit) {
          const __m256i bit4 = _mm256_set1_epi8(0x10);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
          hbits = _mm256_srli_epi16(hbits, 2);
        }
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]), s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
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
        const __m256i m = _mm256_madd_epi16(load256(y.bsums), mins16);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(dw * y.d), acc[r]);
        acc_min[r] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dminw * y.d), acc_min[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]) - hsum(acc_min[r]);
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
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(y.bsums), sc16), 5);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], offset));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * y.d), acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = hsum(acc[r]);
  }
};

constexpr DotKernels kAvx2Kernels = {
    .f32 = dispatch_tile<FloatDot<F32W>>,
    .f16 = dispatch_tile<FloatDot<F16W>>,
    .bf16 = dispatch_tile<FloatDot<BF16W>>,
    .q4_0 = dispatch_tile<SymDot<Q4_0W>>,
    .q4_1 = dispatch_tile<MinDot<Q4_1W>>,
    .q5_0 = dispatch_tile<SymDot<Q5_0W>>,
    .q5_1 = dispatch_tile<MinDot<Q5_1W>>,
    .q8_0 = dispatch_tile<SymDot<Q8_0W>>,
    .q4_k = dispatch_tile<KQuantDot<BlockQ4_K, false>>,
    .q5_k = dispatch_tile<KQuantDot<BlockQ5_K, true>>,
    .q6_k = dispatch_tile<Q6KDot>,
};

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
