// backend/cpu/attention_kernels.h — the inner loops of paged attention (paged_attention.cc) over
// one block of kAttentionKeyBlock keys, per ISA: scoring the block for every query row of a unit
// and adding its probability-weighted V rows to their outputs. The AVX2 and AVX-512 versions do
// the same arithmetic in the same order (AVX-512 holds two keys' eight-lane partial sums in one
// register, or sixteen output dimensions), so they give the same bits; only speed differs.
#pragma once

#include <cstdint>

#include "backend/cpu/cache_rows.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

constexpr int kAttentionKeyBlock = 8;

struct AttentionKernels {
  // Widens nk <= 8 cached key rows (src[i], head dim hd, in the format c says) into the layout
  // `scores` reads, 8·hdp floats (hdp = hd rounded up to 8); keys nk..7 are zero. `row` is hdp
  // floats of the caller's scratch.
  void (*widen_keys)(const CacheRowCodec& c, const uint8_t* const* src, int nk, float* dst,
                     int64_t hdp, int hd, float* row);
  // For each row r < nq with active[r]: out[r·out_stride + jj] = dot(q_r, k_jj) (eight-lane
  // partial sums in dimension order, then hsum8x8), rounded to act, times scale, rounded to act.
  // q rows are hdp floats apart.
  void (*scores)(const float* q, int nq, int64_t hdp, const float* keys, const uint8_t* active,
                 float scale, DType act, float* out, int64_t out_stride);
  // For each row r < nq: out_r[d] += p_r[jj]·v_jj[d] for jj in [first[r], end[r]) in key order;
  // p rows p_stride apart, V rows (f32, hdp wide) and output rows hdp apart.
  void (*accumulate)(const float* p, int64_t p_stride, const float* v, int64_t hdp, int nq,
                     const int8_t* first, const int8_t* end, float* out);
};

const AttentionKernels& avx2_attention_kernels();
// nullptr when this build has no AVX-512 code.
const AttentionKernels* avx512_attention_kernels();

}  // namespace kestrel::cpu
