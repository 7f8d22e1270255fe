// AVX-512 attention block kernels (attention_kernels.h). Keys are widened in pairs: for keys 2i
// and 2i+1 and each eight dimensions, sixteen floats [k_2i | k_2i+1], so one FMA against the
// query's eight dimensions (duplicated) advances both keys' eight-lane partial sums exactly as
// two AVX2 FMAs would; the halves then go through the same hsum8x8. Outputs are accumulated
// sixteen dimensions per register, each element by the same FMAs in the same key order.
#include "backend/cpu/attention_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512DQ__)

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/simd_math.h"

// GCC 12 warns inside its own AVX-512 intrinsics (the unused halves of _mm512_set1_*).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kestrel::cpu {
namespace {

constexpr int kPairs = kAttentionKeyBlock / 2;

void widen_keys(const CacheRowCodec& codec, const uint8_t* const* src, int nk, float* dst,
                int64_t hdp, int hd, float* row) {
  const int64_t chunks = hdp / 8;
  for (int jj = 0; jj < kAttentionKeyBlock; ++jj) {
    float* base = dst + (jj / 2) * chunks * 16 + 8 * (jj % 2);
    if (jj >= nk) {
      for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(base + 16 * c, _mm256_setzero_ps());
      continue;
    }
    const float* w = row;
    if (codec.dtype == DType::F32 && hd == hdp) {
      w = reinterpret_cast<const float*>(src[jj]);
    } else {
      widen_cache_row(codec, src[jj], row, hd);
    }
    for (int64_t c = 0; c < chunks; ++c)
      _mm256_storeu_ps(base + 16 * c, _mm256_loadu_ps(w + 8 * c));
  }
}

// Rows r .. r+G-1 together: G·4 independent FMA chains (one row alone is bound by the latency of
// its four) and each key vector loaded once for all G. Every row's FMAs are its own, in the same
// order, so the group changes no bits; inactive rows are computed but not stored.
template <int G>
void score_rows(const float* q, int r, int64_t hdp, const float* keys, const uint8_t* active,
                float scale, DType act, float* out, int64_t out_stride) {
  const int64_t chunks = hdp / 8;
  __m512 acc[G][kPairs];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int i = 0; i < kPairs; ++i) acc[g][i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    __m512 kv[kPairs];
#pragma GCC unroll 4
    for (int i = 0; i < kPairs; ++i) kv[i] = _mm512_loadu_ps(keys + (i * chunks + c) * 16);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + (r + g) * hdp + 8 * c));
#pragma GCC unroll 4
      for (int i = 0; i < kPairs; ++i) acc[g][i] = _mm512_fmadd_ps(qv, kv[i], acc[g][i]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    if (!active[r + g]) continue;
    __m256 halves[kAttentionKeyBlock];
#pragma GCC unroll 4
    for (int i = 0; i < kPairs; ++i) {
      halves[2 * i] = _mm512_castps512_ps256(acc[g][i]);
      halves[2 * i + 1] = _mm512_extractf32x8_ps(acc[g][i], 1);
    }
    simd::store_scores8(halves, scale, act, out + (r + g) * out_stride);
  }
}

void scores(const float* q, int nq, int64_t hdp, const float* keys, const uint8_t* active,
            float scale, DType act, float* out, int64_t out_stride) {
  int r = 0;
  for (; r + 4 <= nq; r += 4) {
    if (active[r] | active[r + 1] | active[r + 2] | active[r + 3])
      score_rows<4>(q, r, hdp, keys, active, scale, act, out, out_stride);
  }
  switch (nq - r) {
    case 3:
      return score_rows<3>(q, r, hdp, keys, active, scale, act, out, out_stride);
    case 2:
      return score_rows<2>(q, r, hdp, keys, active, scale, act, out, out_stride);
    case 1:
      if (active[r]) score_rows<1>(q, r, hdp, keys, active, scale, act, out, out_stride);
      return;
    default:
      return;
  }
}

// Rows r .. r+G-1 over the same keys [j0, j1): G·(slice/16) independent chains, each V vector
// loaded once for all G rows; per row the same FMAs in the same key order as one row alone.
template <int G>
void accumulate_rows(const float* p, int64_t p_stride, const float* v, int64_t hdp, int r, int j0,
                     int j1, float* out) {
  constexpr int64_t kSlice = 64;
  for (int64_t d0 = 0; d0 < hdp; d0 += kSlice) {
    // hdp is a multiple of 8: each register is whole, half or unused.
    __mmask16 mask[kSlice / 16];
    __m512 acc[G][kSlice / 16];
#pragma GCC unroll 4
    for (int i = 0; i < kSlice / 16; ++i) {
      const int64_t left = hdp - d0 - 16 * i;
      mask[i] = left >= 16 ? __mmask16(0xFFFF) : left >= 8 ? __mmask16(0xFF) : __mmask16(0);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g)
        acc[g][i] = _mm512_maskz_loadu_ps(mask[i], out + (r + g) * hdp + d0 + 16 * i);
    }
    for (int jj = j0; jj < j1; ++jj) {
      const float* vr = v + jj * hdp + d0;
      __m512 vv[kSlice / 16];
#pragma GCC unroll 4
      for (int i = 0; i < kSlice / 16; ++i) vv[i] = _mm512_maskz_loadu_ps(mask[i], vr + 16 * i);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512 pj = _mm512_set1_ps(p[(r + g) * p_stride + jj]);
#pragma GCC unroll 4
        for (int i = 0; i < kSlice / 16; ++i) acc[g][i] = _mm512_fmadd_ps(pj, vv[i], acc[g][i]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
      for (int i = 0; i < kSlice / 16; ++i)
        _mm512_mask_storeu_ps(out + (r + g) * hdp + d0 + 16 * i, mask[i], acc[g][i]);
  }
}

// Rows go four (or three, two) at a time where they see the same keys of the block — every
// block but the causal diagonal's — and one at a time otherwise.
void accumulate(const float* p, int64_t p_stride, const float* v, int64_t hdp, int nq,
                const int8_t* first, const int8_t* end, float* out) {
  auto same = [&](int r, int g) {
    for (int i = 1; i < g; ++i)
      if (first[r + i] != first[r] || end[r + i] != end[r]) return false;
    return true;
  };
  int r = 0;
  while (r < nq) {
    const int left = nq - r;
    if (left >= 4 && same(r, 4)) {
      accumulate_rows<4>(p, p_stride, v, hdp, r, first[r], end[r], out);
      r += 4;
    } else if (left >= 3 && same(r, 3)) {
      accumulate_rows<3>(p, p_stride, v, hdp, r, first[r], end[r], out);
      r += 3;
    } else if (left >= 2 && same(r, 2)) {
      accumulate_rows<2>(p, p_stride, v, hdp, r, first[r], end[r], out);
      r += 2;
    } else {
      accumulate_rows<1>(p, p_stride, v, hdp, r, first[r], end[r], out);
      r += 1;
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
