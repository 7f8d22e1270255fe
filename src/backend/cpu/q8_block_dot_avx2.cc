// The AVX2 kernels of q8_block_dot.h: eight weight rows at a time as the eight f32 lanes, so the
// per-block step of every output is one lane of one fma, in the order the scalar kernel and the
// AVX-512 panel GEMMs use. A block's integer sums come from maddubs/madd (exact) and are reduced
// across the eight rows with hadd, which only adds integers.
#include "backend/cpu/q8_block_dot.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include "backend/cpu/matmul_x86_common.h"

namespace kestrel::cpu {
namespace {

constexpr int kLanes = 8;

// Eight int32 sums of u·y over groups of four bytes; u unsigned (< 128), y signed.
__m256i dot_u8(__m256i u, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

// A block's codes as VNNI-style operands: `u` unsigned (|w| for signed codes) and `sign` the
// codes whose signs go onto the activations (null vector for unsigned codes).
struct Operand {
  __m256i u, sign;
};

template <DType T>
struct Format;
template <>
struct Format<DType::Q4_0> {
  using Block = BlockQ4_0;
  static constexpr bool kMin = false;
  static Operand codes(const Block& b) {
    const __m256i w = _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8));
    return {_mm256_abs_epi8(w), w};
  }
};
template <>
struct Format<DType::Q4_1> {
  using Block = BlockQ4_1;
  static constexpr bool kMin = true;
  static Operand codes(const Block& b) { return {nibbles32(b.qs), _mm256_setzero_si256()}; }
};
template <>
struct Format<DType::Q5_0> {
  using Block = BlockQ5_0;
  static constexpr bool kMin = false;
  static Operand codes(const Block& b) {
    const __m256i u = _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(load_u32(b.qh)));
    const __m256i w = _mm256_sub_epi8(u, _mm256_set1_epi8(16));
    return {_mm256_abs_epi8(w), w};
  }
};
template <>
struct Format<DType::Q5_1> {
  using Block = BlockQ5_1;
  static constexpr bool kMin = true;
  static Operand codes(const Block& b) {
    return {_mm256_or_si256(nibbles32(b.qs), bits_to_0x10(load_u32(b.qh))), _mm256_setzero_si256()};
  }
};
template <>
struct Format<DType::Q8_0> {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static Operand codes(const Block& b) {
    const __m256i w = load256(b.qs);
    return {_mm256_abs_epi8(w), w};
  }
};

template <>
struct Format<DType::MXFP4> {
  using Block = BlockMXFP4;
  static constexpr bool kMin = false;
  static Operand codes(const Block& b) {
    const __m256i values = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
    const __m256i w = _mm256_shuffle_epi8(values, nibbles32(b.qs));
    return {_mm256_abs_epi8(w), w};
  }
};

template <DType T>
__m256i block_dot(const Operand& w, __m256i y) {
  if constexpr (Format<T>::kMin) return dot_u8(w.u, y);
  return dot_u8(w.u, _mm256_sign_epi8(y, w.sign));
}

// The eight blocks' leading four bytes (the f16 d, and m for the formats with a min; MXFP4's
// exponent byte) in one gather: lane i from base + offsets[i].
__m256i gather_heads(const uint8_t* base, __m256i offsets) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), offsets, 1);
}
// The low (high) f16 of each lane, as f32.
__m256 low_f16(__m256i v) {
  const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                        1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i h = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0b1000);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(h));
}
__m256 high_f16(__m256i v) {
  return low_f16(_mm256_srli_epi32(v, 16));
}

// Weight rows [j0, j0 + 8) (fewer at the end: `valid`; the missing lanes repeat the last row and
// are not stored) against NX activation rows.
// The eight blocks' d_w from their gathered heads: the leading f16, or MXFP4's E8M0 byte as
// 2^(e − 128) (mxfp4_scale's bits: e − 1 in the exponent field, subnormal below 2).
template <DType T>
__m256 head_scales(__m256i heads) {
  if constexpr (T == DType::MXFP4) {
    const __m256i e = _mm256_and_si256(heads, _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
  } else {
    return low_f16(heads);
  }
}

template <DType T, int NX>
void eight_rows(const uint8_t* w, size_t ws, int valid, const uint8_t* x, size_t xs, int64_t nb,
                float* out, int64_t os) {
  using Block = typename Format<T>::Block;
  const Block* rows[kLanes];
  alignas(32) int32_t offsets[kLanes];
#pragma GCC unroll 8
  for (int i = 0; i < kLanes; ++i) {
    const int at = i < valid ? i : valid - 1;
    rows[i] = reinterpret_cast<const Block*>(w + size_t(at) * ws);
    offsets[i] = int32_t(size_t(at) * ws);
  }
  const __m256i heads_at = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  const BlockQ8S* xr[NX];
  __m256 acc[NX];
#pragma GCC unroll 4
  for (int r = 0; r < NX; ++r) {
    xr[r] = reinterpret_cast<const BlockQ8S*>(x + size_t(r) * xs);
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i p[NX][kLanes];
#pragma GCC unroll 8
    for (int i = 0; i < kLanes; ++i) {
      const Operand c = Format<T>::codes(rows[i][b]);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) p[r][i] = block_dot<T>(c, load256(xr[r][b].qs));
    }
    const __m256i heads = gather_heads(w + size_t(b) * sizeof(Block), heads_at);
    const __m256 dw = head_scales<T>(heads);
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
      const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(reduce8(p[r])), _mm256_set1_ps(xr[r][b].d));
      acc[r] = _mm256_fmadd_ps(t, dw, acc[r]);
    }
    if constexpr (Format<T>::kMin) {
      const __m256 mw = high_f16(heads);
#pragma GCC unroll 4
      for (int r = 0; r < NX; ++r) acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xr[r][b].s), acc[r]);
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
  over_eight_rows(kRows, w, ws, nw, x, xs, nx, k / QK, out, os);
}

const Q8BlockKernels kAvx2{rows_dot<DType::Q4_0>, rows_dot<DType::Q4_1>, rows_dot<DType::Q5_0>,
                           rows_dot<DType::Q5_1>, rows_dot<DType::Q8_0>, rows_dot<DType::MXFP4>,
                           kMaxTileRows};

}  // namespace

const Q8BlockKernels* avx2_q8_block_kernels() {
  return &kAvx2;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const Q8BlockKernels* avx2_q8_block_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
