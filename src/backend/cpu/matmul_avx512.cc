// AVX-512 (F, BW, VL, VNNI) dot-product kernels. 32-element blocks go two at a time through
// _mm512_dpbusd_epi32; K-quant sub-blocks use _mm512_maddubs_epi16 then _mm512_dpwssd_epi32 to
// apply the per-sub-block scale while accumulating. Integer sums are exact.
//
// This file is compiled with AVX-512 flags, so it must not create out-of-line code the linker
// could share with other files (an inline function or template of another header): it uses only
// intrinsics, unnamed namespaces (its own and matmul_x86_common.h's) and the static helpers of
// quant_kscales.h and tile_sums_avx512.h.
#include "backend/cpu/matmul_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)

// GCC 12's AVX-512 headers build casts and extracts from a self-initialized "undefined" vector,
// which its own -Wuninitialized then reports (GCC PR105593, fixed in 12.3/13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/matmul_x86_common.h"
#include "backend/cpu/tile_sums_avx512.h"

namespace kestrel::cpu {
namespace {

__m512i load512(const void* p) {
  return _mm512_loadu_si512(p);
}

// Two 32-byte halves into one register, a in the low half.
__m512i join(__m256i a, __m256i b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// [s0 x 8, s1 x 8]: the f32 scales of two consecutive 32-element blocks.
__m512 pair_scale(float s0, float s1) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

// The signed-weight dot product: |w| as the unsigned operand, y negated where w < 0.
__m512i dot_s8(__m512i aw, __mmask64 neg, __m512i y) {
  const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sy);
}
__m256i dot_s8(__m256i aw, __m256i w, __m256i y) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(y, w));
}

// The 64 codes of two consecutive nibble arrays, in element order.
__m512i nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i v = _mm256_set_m128i(load128(qs1), load128(qs0));
  const __m256i m = _mm256_set1_epi8(0xF);
  // 128-bit lanes [b0 low, b1 low, b0 high, b1 high] -> [b0 low, b0 high, b1 low, b1 high].
  const __m512i z = join(_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
  return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

// bits_to_0x10 of two consecutive blocks: bytes 0..31 from bits0, 32..63 from bits1.
__m512i bits_to_0x10(uint32_t bits0, uint32_t bits1) {
  return _mm512_maskz_mov_epi8(uint64_t(bits0) | (uint64_t(bits1) << 32), _mm512_set1_epi8(0x10));
}

const void* bsums(const BlockQ8_K& y) {
  return reinterpret_cast<const uint8_t*>(&y) + __builtin_offsetof(BlockQ8_K, bsums);
}

// ---- float weights: tiles of weight rows x activation rows, masked loads for the tail ----

// Sixteen-wide forms of the common float decoders.
template <typename W>
struct Wide;
template <>
struct Wide<F32W> {
  static constexpr int64_t kBytes = 4;
  static __m512 load16(const void* w, int64_t i) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  }
  static __m512 load_tail(const void* w, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  }
};
template <>
struct Wide<F16W> {
  static constexpr int64_t kBytes = 2;
  static __m512 load16(const void* w, int64_t i) {
    return _mm512_cvtph_ps(load256(static_cast<const uint16_t*>(w) + i));
  }
  static __m512 load_tail(const void* w, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
  }
};
template <>
struct Wide<BF16W> {
  static constexpr int64_t kBytes = 2;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load16(const void* w, int64_t i) {
    return widen(load256(static_cast<const uint16_t*>(w) + i));
  }
  static __m512 load_tail(const void* w, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
  }
};

// Weight rows per call for a tile of NX activation rows: NW·NX accumulators, NW weight vectors
// and one activation vector fit the 32 registers, and each activation vector loaded feeds NW
// multiply-adds (one weight row per call left the loads, not the FMAs, as the limit).
constexpr int float_weight_rows(int nx) {
  constexpr int kRows[kMaxWideTileRows + 1] = {0, 8, 8, 6, 6, 4, 4, 3, 3};
  return kRows[nx];
}

template <typename W>
struct FloatRows {
  static constexpr int64_t kPrefetchElems = 512;

  // NW weight rows x NX activation rows. One accumulator per output, 16 elements per step in
  // order, masked tail, then hsum16x16: the same arithmetic for an output whatever tile it is in.
  template <int NW, int NX>
  static void tile(const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, int64_t k, float* out,
                   int64_t os) {
    __m512 acc[NW][NX];
#pragma GCC unroll 8
    for (int n = 0; n < NW; ++n)
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) acc[n][r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      __m512 wv[NW];
#pragma GCC unroll 8
      for (int n = 0; n < NW; ++n) {
        // Several rows at once defeat the hardware's stream prefetch when weights come from
        // L3 or DRAM (decode); fetch each row a few lines ahead.
        _mm_prefetch(reinterpret_cast<const char*>(w + size_t(n) * ws) +
                         (i + kPrefetchElems) * Wide<W>::kBytes,
                     _MM_HINT_T0);
        wv[n] = Wide<W>::load16(w + size_t(n) * ws, i);
      }
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        __m512 xv = _mm512_loadu_ps(row<float>(x, xs, r) + i);
        __asm__("" : "+v"(xv));  // one load for all NW rows, not one folded into each FMA
#pragma GCC unroll 8
        for (int n = 0; n < NW; ++n) acc[n][r] = _mm512_fmadd_ps(wv[n], xv, acc[n][r]);
      }
    }
    if (i < k) {
      const __mmask16 m = __mmask16((1u << (k - i)) - 1);
      __m512 wv[NW];
#pragma GCC unroll 8
      for (int n = 0; n < NW; ++n) wv[n] = Wide<W>::load_tail(w + size_t(n) * ws, i, m);
#pragma GCC unroll 8
      for (int r = 0; r < NX; ++r) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, row<float>(x, xs, r) + i);
#pragma GCC unroll 8
        for (int n = 0; n < NW; ++n) acc[n][r] = _mm512_fmadd_ps(wv[n], xv, acc[n][r]);
      }
    }
    avx512::store_tile_sums<16, NW, NX>(acc, out, os);
  }

  // nw weight rows in tiles of float_weight_rows(NX), the last few one at a time.
  template <int NX>
  static void rows(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int64_t k,
                   float* out, int64_t os) {
    constexpr int kNW = float_weight_rows(NX);
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* xb = static_cast<const uint8_t*>(x);
    int64_t j = 0;
    for (; j + kNW <= nw; j += kNW) tile<kNW, NX>(wb + size_t(j) * ws, ws, xb, xs, k, out + j, os);
    for (; j < nw; ++j) tile<1, NX>(wb + size_t(j) * ws, ws, xb, xs, k, out + j, os);
  }
};

// The single-row DotFn form of FloatRows, for the table make_dot_kernels builds.
template <typename W>
struct FloatDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    FloatRows<W>::template rows<NX>(w, 0, 1, x, xs, k, out, os);
  }
};

// ---- 32-element blocks against Q8_0 (signed weight codes), two blocks per step ----

// The 64 codes of two consecutive blocks; the common decoders (W::codes) take an odd last one.
template <typename W>
struct Pair;
template <>
struct Pair<Q5_0W> {
  static __m512i codes(const BlockQ5_0* b) {
    const __m512i q = _mm512_or_si512(nibbles64(b[0].qs, b[1].qs),
                                      bits_to_0x10(load_u32(b[0].qh), load_u32(b[1].qh)));
    return _mm512_sub_epi8(q, _mm512_set1_epi8(16));
  }
};

template <typename W>
struct SymDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    const int64_t nb = k / QK;
    const BlockQ8_0* xr[NX];
    __m512 acc[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_0>(x, xs, r);
      acc[r] = _mm512_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const __m512i q = Pair<W>::codes(wb + b);
      const __m512i aq = _mm512_abs_epi8(q);
      const __mmask64 neg = _mm512_movepi8_mask(q);
      const float dw0 = f16(wb[b].d), dw1 = f16(wb[b + 1].d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_0* y = xr[r] + b;
        const __m512i yv = join(load256(y[0].qs), load256(y[1].qs));
        const __m512 p = _mm512_cvtepi32_ps(dot_s8(aq, neg, yv));
        acc[r] = _mm512_fmadd_ps(p, pair_scale(dw0 * f16(y[0].d), dw1 * f16(y[1].d)), acc[r]);
      }
    }
    float tail[NX] = {};
    if (b < nb) {
      const __m256i q = W::codes(wb[b]);
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float dw = f16(wb[b].d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_0& y = xr[r][b];
        const __m256 p = _mm256_cvtepi32_ps(dot_s8(aq, q, load256(y.qs)));
        tail[r] = hsum256(_mm256_mul_ps(p, _mm256_set1_ps(dw * f16(y.d))));
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(acc[r]) + tail[r];
  }
};

// ---- 32-element blocks with a min against Q8_1, two blocks per step ----

template <>
struct Pair<Q5_1W> {
  static __m512i codes(const BlockQ5_1* b) {
    return _mm512_or_si512(nibbles64(b[0].qs, b[1].qs),
                           bits_to_0x10(load_u32(b[0].qh), load_u32(b[1].qh)));
  }
};

template <typename W>
struct MinDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const typename W::Block*>(w);
    const int64_t nb = k / QK;
    const BlockQ8_1* xr[NX];
    __m512 acc[NX];
    float mins[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_1>(x, xs, r);
      acc[r] = _mm512_setzero_ps();
      mins[r] = 0.0f;
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      const __m512i q = Pair<W>::codes(wb + b);
      const float dw0 = f16(wb[b].d), dw1 = f16(wb[b + 1].d);
      const float mw0 = f16(wb[b].m), mw1 = f16(wb[b + 1].m);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_1* y = xr[r] + b;
        const __m512i yv = join(load256(y[0].qs), load256(y[1].qs));
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yv));
        acc[r] = _mm512_fmadd_ps(p, pair_scale(dw0 * f16(y[0].d), dw1 * f16(y[1].d)), acc[r]);
        mins[r] += mw0 * f16(y[0].s);
        mins[r] += mw1 * f16(y[1].s);
      }
    }
    if (b < nb) {
      const __m256i q = W::codes(wb[b]);
      const float dw = f16(wb[b].d), mw = f16(wb[b].m);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_1& y = xr[r][b];
        const __m256 p =
            _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, load256(y.qs)));
        mins[r] += hsum256(_mm256_mul_ps(p, _mm256_set1_ps(dw * f16(y.d))));
        mins[r] += mw * f16(y.s);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(acc[r]) + mins[r];
  }
};

// ---- K-quants against Q8_K ----

// Q4_K / Q5_K: the two sub-blocks of chunk c (see KQuantCodes) in one register.
template <typename Block, bool kHighBit>
struct KQuantDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const Block*>(w);
    const BlockQ8_K* xr[NX];
    __m512 acc[NX];
    __m256 acc_min[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_K>(x, xs, r);
      acc[r] = _mm512_setzero_ps();
      acc_min[r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const Block& blk = wb[b];
      KQuantCodes<Block, kHighBit> codes(blk);
      __m512i isum[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) isum[r] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        codes.chunk(blk, c, lo, hi);
        const __m512i q = join(lo, hi);
        const __m512i scale =
            _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(codes.sc[2 * c]),
                                    _mm512_set1_epi16(codes.sc[2 * c + 1]));
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) {
          const __m512i p = _mm512_maddubs_epi16(q, load512(xr[r][b].qs + 64 * c));
          isum[r] = _mm512_dpwssd_epi32(isum[r], p, scale);
        }
      }
      const float dw = f16(blk.d), dminw = f16(blk.dmin);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = xr[r][b];
        const __m256i m = codes.mins(bsums(y));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_set1_ps(dw * y.d), acc[r]);
        acc_min[r] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dminw * y.d), acc_min[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(acc[r]) - hsum256(acc_min[r]);
  }
};

// For chunk g (64 elements = four 16-element sub-blocks), int16 lane i -> scale 4g + i/8.
alignas(64) constexpr uint16_t kQ6ScaleIndex[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
     6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9,  9,
     10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// Q6_K: unsigned 6-bit codes times y, scaled per sub-block; the -32 offset is applied once per
// super-block as 32 * sum_j sc_j * bsums_j.
struct Q6KDot {
  template <int NX>
  static void run(const void* w, const void* x, size_t xs, int64_t k, float* out, int64_t os) {
    const auto* wb = static_cast<const BlockQ6_K*>(w);
    const BlockQ8_K* xr[NX];
    __m512 acc[NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      xr[r] = row<BlockQ8_K>(x, xs, r);
      acc[r] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0xF), bits45 = _mm512_set1_epi8(0x30);
    // Per 32-byte half of a chunk: where the two high bits of its codes sit in qh.
    const __m512i shift_a =
        _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i shift_b =
        _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_setzero_si512(), _mm512_set1_epi16(2));
    for (int64_t b = 0; b < k / QK_K; ++b) {
      const BlockQ6_K& blk = wb[b];
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(blk.scales));
      const __m512i sc_all = _mm512_castsi256_si512(sc16);
      __m512i isum[NX];
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) isum[r] = _mm512_setzero_si512();
      for (int n = 0; n < 2; ++n) {
        const __m512i ql = load512(blk.ql + 64 * n);
        const __m256i qh = load256(blk.qh + 32 * n);
        const __m512i qh2 = join(qh, qh);
        // Elements 0..63 of the half: low nibbles, qh bits 0-1 (first 32) and 2-3 (next 32);
        // elements 64..127: high nibbles, qh bits 4-5 and 6-7.
        const __m512i codes[2] = {
            _mm512_or_si512(_mm512_and_si512(ql, low4),
                            _mm512_and_si512(_mm512_sllv_epi16(qh2, shift_a), bits45)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                            _mm512_and_si512(_mm512_srlv_epi16(qh2, shift_b), bits45)),
        };
        for (int h = 0; h < 2; ++h) {
          const int g = 2 * n + h;
          const __m512i scale = _mm512_permutexvar_epi16(load512(kQ6ScaleIndex[g]), sc_all);
#pragma GCC unroll 4
          for (int r = 0; r < NX; ++r) {
            const __m512i p = _mm512_maddubs_epi16(codes[h], load512(xr[r][b].qs + 64 * g));
            isum[r] = _mm512_dpwssd_epi32(isum[r], p, scale);
          }
        }
      }
      const float dw = f16(blk.d);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) {
        const BlockQ8_K& y = xr[r][b];
        const __m256i offset = q6k_offset(bsums(y), sc16);
        const __m512i total = _mm512_sub_epi32(isum[r], _mm512_zextsi256_si512(offset));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(dw * y.d), acc[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(acc[r]);
  }
};

// The float kernels take eight activation rows and several weight rows per call.
constexpr DotKernels make_avx512_kernels() {
  DotKernels k = make_dot_kernels<FloatDot, SymDot, MinDot, KQuantDot, Q6KDot>();
  k.f32_rows = dispatch_rows8<FloatRows<F32W>>;
  k.f16_rows = dispatch_rows8<FloatRows<F16W>>;
  k.bf16_rows = dispatch_rows8<FloatRows<BF16W>>;
  k.float_tile_rows = kMaxWideTileRows;
  return k;
}
constexpr DotKernels kAvx512Kernels = make_avx512_kernels();

}  // namespace

const DotKernels* avx512_dot_kernels() {
  return &kAvx512Kernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const DotKernels* avx512_dot_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
