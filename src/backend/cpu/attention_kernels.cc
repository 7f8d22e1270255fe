// AVX2 attention block kernels (attention_kernels.h): eight keys' dot products in eight
// registers, outputs in 64-dimension slices of eight registers.
#include "backend/cpu/attention_kernels.h"

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/simd_math.h"

namespace kestrel::cpu {
namespace {

void widen_keys(const CacheRowCodec& c, const uint8_t* const* src, int nk, float* dst, int64_t hdp,
                int hd, float*) {
  widen_cache_rows(c, src, nk, dst, hdp, hd);
  std::fill(dst + nk * hdp, dst + kAttentionKeyBlock * hdp, 0.0f);
}

void scores(const float* q, int nq, int64_t hdp, const float* keys, const uint8_t* active,
            float scale, DType act, float* out, int64_t out_stride) {
  for (int r = 0; r < nq; ++r) {
    if (!active[r]) continue;
    const float* qr = q + r * hdp;
    __m256 acc[kAttentionKeyBlock];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t d = 0; d < hdp; d += 8) {
      const __m256 qv = _mm256_loadu_ps(qr + d);
#pragma GCC unroll 8
      for (int jj = 0; jj < kAttentionKeyBlock; ++jj)
        acc[jj] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + jj * hdp + d), acc[jj]);
    }
    simd::store_scores8(acc, scale, act, out + r * out_stride);
  }
}

void accumulate(const float* p, int64_t p_stride, const float* v, int64_t hdp, int nq,
                const int8_t* first, const int8_t* end, float* out) {
  constexpr int64_t kSlice = 64;
  for (int r = 0; r < nq; ++r) {
    const float* pr = p + r * p_stride;
    float* o = out + r * hdp;
    for (int64_t d0 = 0; d0 < hdp; d0 += kSlice) {
      const int vecs = int(std::min<int64_t>(kSlice, hdp - d0) / 8);
      __m256 acc[kSlice / 8];
#pragma GCC unroll 8
      for (int i = 0; i < kSlice / 8; ++i)
        acc[i] = i < vecs ? _mm256_loadu_ps(o + d0 + 8 * i) : _mm256_setzero_ps();
      for (int jj = first[r]; jj < end[r]; ++jj) {
        const __m256 pj = _mm256_broadcast_ss(pr + jj);
        const float* vr = v + jj * hdp + d0;
#pragma GCC unroll 8
        for (int i = 0; i < kSlice / 8; ++i)
          if (i < vecs) acc[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * i), acc[i]);
      }
#pragma GCC unroll 8
      for (int i = 0; i < kSlice / 8; ++i)
        if (i < vecs) _mm256_storeu_ps(o + d0 + 8 * i, acc[i]);
    }
  }
}

constexpr AttentionKernels kKernels = {widen_keys, scores, accumulate};

}  // namespace

const AttentionKernels& avx2_attention_kernels() {
  return kKernels;
}

}  // namespace kestrel::cpu
