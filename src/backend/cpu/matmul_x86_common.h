// backend/cpu/matmul_x86_common.h — the 256-bit helpers and weight decoders the AVX2 row kernels
// share.
//
// Include only from the AVX2 kernel files, inside their ISA guard. Everything here has internal
// linkage (an unnamed namespace), so each including file gets its own copy compiled with its own
// flags, and each file uses a part of it ([[maybe_unused]]).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "tensor/quant_formats.h"
#include "tensor/quant_kscales.h"

namespace kestrel::cpu {
namespace {

template <typename T>
const T* row(const void* x, size_t stride, int r) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(x) + size_t(r) * stride);
}

[[maybe_unused]] float f16(uint16_t h) {
  return _cvtsh_ss(h);
}

[[maybe_unused]] float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

[[maybe_unused]] __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
[[maybe_unused]] __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

[[maybe_unused]] uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 32 codes of a 16-byte nibble array: low nibbles (elements 0..15), then high nibbles.
[[maybe_unused]] __m256i nibbles32(const uint8_t* qs) {
  const __m128i v = load128(qs), m = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte j = 0x10 where bit j of bits is set: the fifth bit of Q5_0 / Q5_1 codes. A single masked
// move where the including file is compiled with AVX-512BW/VL.
[[maybe_unused]] __m256i bits_to_0x10(uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_mov_epi8(bits, _mm256_set1_epi8(0x10));
#else
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), spread);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
#endif
}

// ---- eight weight rows as the eight f32 lanes (the row kernels' shape) ----

// Lane i = the sum of p[i]'s eight lanes: a reduction of integers, so exact.
[[maybe_unused]] __m256i reduce8(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

// The first `valid` lanes of v to out.
[[maybe_unused]] void store_lanes(float* out, __m256 v, int valid) {
  if (valid == 8) {
    _mm256_storeu_ps(out, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::memcpy(out, tmp, size_t(valid) * sizeof(float));
}

// A kernel over weight rows [0, valid) of the eight at w (the missing lanes repeat the last row
// and are not stored) against NX activation rows; `len` is its length unit (blocks or elements).
using EightRowsFn = void (*)(const uint8_t* w, size_t ws, int valid, const uint8_t* x, size_t xs,
                             int64_t len, float* out, int64_t os);

// A RowsDotFn's work given the kernels for NX = 1..kMaxTileRows: nw rows in groups of eight.
[[maybe_unused]] void over_eight_rows(const EightRowsFn (&by_nx)[kMaxTileRows], const void* w,
                                      size_t ws, int64_t nw, const void* x, size_t xs, int nx,
                                      int64_t len, float* out, int64_t os) {
  const EightRowsFn run = by_nx[nx < 1 ? 0 : nx > kMaxTileRows ? kMaxTileRows - 1 : nx - 1];
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t j = 0; j < nw; j += 8)
    run(wb + size_t(j) * ws, ws, int(std::min<int64_t>(8, nw - j)), static_cast<const uint8_t*>(x),
        xs, len, out + j, os);
}

// v[e] = element e of rows 0..7 (v[l] held elements 0..7 of row l).
[[maybe_unused]] void transpose8(__m256* v) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  v[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// ---- float weights: eight at a time, plus one for scalar tails ----

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

// ---- K-quants ----

// One Q4_K / Q5_K super-block, decoded chunk by chunk. Chunk c (64 elements) holds sub-block
// 2c (low nibbles of qs[32c..]) and 2c+1 (high nibbles).
template <typename Block, bool kHighBit>
struct KQuantCodes {
  explicit KQuantCodes(const Block& blk) {
    uint8_t mn[8];
    unpack_k_scales(blk.scales, sc, mn);
    const __m128i mn8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
    // mn_j once for each of the two bsums of sub-block j.
    mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
    if constexpr (kHighBit) hbits = load256(blk.qh);
  }

  // The codes of sub-blocks 2c (lo) and 2c+1 (hi) of blk, the block this was built from. Call
  // for c = 0..3 in order: Q5_K's high bits are consumed two per chunk.
  void chunk(const Block& blk, int c, __m256i& lo, __m256i& hi) {
    const __m256i low4 = _mm256_set1_epi8(0xF);
    const __m256i q = load256(blk.qs + 32 * c);
    lo = _mm256_and_si256(q, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if constexpr (kHighBit) {
      const __m256i bit4 = _mm256_set1_epi8(0x10);
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
      hbits = _mm256_srli_epi16(hbits, 2);
    }
  }

  // sum_j mn_j * bsums_j of one Q8_K row, in eight int32 lanes.
  __m256i mins(const void* bsums) const { return _mm256_madd_epi16(load256(bsums), mins16); }

  uint8_t sc[8];
  __m256i mins16;
  __m256i hbits = _mm256_setzero_si256();
};

// Q6_K: 32 * sum_j sc_j * bsums_j in eight int32 lanes, the -32 code offset of one super-block.
[[maybe_unused]] __m256i q6k_offset(const void* bsums, __m256i sc16) {
  return _mm256_slli_epi32(_mm256_madd_epi16(load256(bsums), sc16), 5);
}

}  // namespace
}  // namespace kestrel::cpu
