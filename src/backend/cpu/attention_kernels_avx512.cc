// AVX-512 attention block kernels (attention_kernels.h). Keys are widened in pairs: for keys 2i
// and 2i+1 and each eight dimensions, sixteen floats [k_2i | k_2i+1], so one FMA against the
// query's eight dimensions (duplicated) advances both keys' eight-lane partial sums exactly as
// two AVX2 FMAs would; the halves then go through the same hsum8x8. Outputs are accumulated
// sixteen dimensions per register, each element by the same FMAs in the same key order.
#include "backend/cpu/attention_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/simd_math.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

constexpr int kPairs = kAttentionKeyBlock / 2;

void widen_keys(DType t, const uint8_t* const* src, int nk, float* dst, int64_t hdp, int hd) {
  thread_local std::vector<float> row;
  row.resize(size_t(hdp));
  const int64_t chunks = hdp / 8;
  for (int jj = 0; jj < kAttentionKeyBlock; ++jj) {
    float* base = dst + (jj / 2) * chunks * 16 + 8 * (jj % 2);
    if (jj >= nk) {
      for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(base + 16 * c, _mm256_setzero_ps());
      continue;
    }
    const float* w = row.data();
    if (t == DType::F32 && hd == hdp) {
      w = reinterpret_cast<const float*>(src[jj]);
    } else {
      widen_cache_row(t, src[jj], row.data(), hd);
    }
    for (int64_t c = 0; c < chunks; ++c)
      _mm256_storeu_ps(base + 16 * c, _mm256_loadu_ps(w + 8 * c));
  }
}

void scores(const float* q, int nq, int64_t hdp, const float* keys, const uint8_t* active,
            float scale, DType act, float* out, int64_t out_stride) {
  const int64_t chunks = hdp / 8;
  for (int r = 0; r < nq; ++r) {
    if (!active[r]) continue;
    const float* qr = q + r * hdp;
    __m512 acc[kPairs];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(qr + 8 * c));
#pragma GCC unroll 4
      for (int i = 0; i < kPairs; ++i)
        acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + (i * chunks + c) * 16), acc[i]);
    }
    __m256 halves[kAttentionKeyBlock];
#pragma GCC unroll 4
    for (int i = 0; i < kPairs; ++i) {
      halves[2 * i] = _mm512_castps512_ps256(acc[i]);
      halves[2 * i + 1] = _mm512_extractf32x8_ps(acc[i], 1);
    }
    simd::store_scores8(halves, scale, act, out + r * out_stride);
  }
}

void accumulate(const float* p, int64_t p_stride, const float* v, int64_t hdp, int nq,
                const int8_t* first, const int8_t* end, float* out) {
  constexpr int64_t kSlice = 64;
  for (int r = 0; r < nq; ++r) {
    const float* pr = p + r * p_stride;
    float* o = out + r * hdp;
    for (int64_t d0 = 0; d0 < hdp; d0 += kSlice) {
      // hdp is a multiple of 8: each register is whole, half or unused.
      __mmask16 mask[kSlice / 16];
      __m512 acc[kSlice / 16];
#pragma GCC unroll 4
      for (int i = 0; i < kSlice / 16; ++i) {
        const int64_t left = hdp - d0 - 16 * i;
        mask[i] = left >= 16 ? __mmask16(0xFFFF) : left >= 8 ? __mmask16(0xFF) : __mmask16(0);
        acc[i] = _mm512_maskz_loadu_ps(mask[i], o + d0 + 16 * i);
      }
      for (int jj = first[r]; jj < end[r]; ++jj) {
        const __m512 pj = _mm512_set1_ps(pr[jj]);
        const float* vr = v + jj * hdp + d0;
#pragma GCC unroll 4
        for (int i = 0; i < kSlice / 16; ++i)
          acc[i] = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(mask[i], vr + 16 * i), acc[i]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < kSlice / 16; ++i) _mm512_mask_storeu_ps(o + d0 + 16 * i, mask[i], acc[i]);
    }
  }
}

constexpr AttentionKernels kKernels = {widen_keys, scores, accumulate};

}  // namespace

const AttentionKernels* avx512_attention_kernels() {
  return &kKernels;
}

}  // namespace kestrel::cpu

#else

namespace kestrel::cpu {
const AttentionKernels* avx512_attention_kernels() {
  return nullptr;
}
}  // namespace kestrel::cpu

#endif
