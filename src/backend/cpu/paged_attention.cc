#include "backend/cpu/paged_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/fp16.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

size_t elem_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}

void store_row(DType t, const float* src, void* dst, int64_t n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
  } else if (t == DType::F16) {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
  } else {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

// Where one cached row (one token, one KV head) of K or V starts.
struct CacheRows {
  const KVLayer& c;
  const int32_t* block_table;
  int kv_head;
  const uint8_t* at(const void* base, int32_t pos) const {
    const int64_t slot =
        int64_t(block_table[pos / c.block_size]) * c.block_size + pos % c.block_size;
    const int64_t elem = (slot * c.num_kv_heads + kv_head) * int64_t(c.head_dim);
    return static_cast<const uint8_t*>(base) + elem * int64_t(elem_size(c.dtype));
  }
};

// One (token, kv head) unit of an all-f32 cache: the whole query group of that KV head attends
// together so every K/V row read serves all of the group's heads; online softmax, one pass.
void attend_group_f32(const float* q, const CacheRows& rows, int32_t pos, int group, int hd,
                      float scale, float* out, float* m, float* l) {
  for (int g = 0; g < group; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0.0f;
    std::fill(out + g * hd, out + (g + 1) * hd, 0.0f);
  }
  for (int32_t j = 0; j <= pos; ++j) {
    const float* kr = reinterpret_cast<const float*>(rows.at(rows.c.k, j));
    const float* vr = reinterpret_cast<const float*>(rows.at(rows.c.v, j));
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      float s = 0.0f;
      for (int d = 0; d < hd; ++d) s += qg[d] * kr[d];
      s *= scale;
      float* og = out + g * hd;
      if (s > m[g]) {
        const float corr = std::exp(m[g] - s);
        l[g] *= corr;
        for (int d = 0; d < hd; ++d) og[d] *= corr;
        m[g] = s;
      }
      const float p = std::exp(s - m[g]);
      l[g] += p;
      for (int d = 0; d < hd; ++d) og[d] += p * vr[d];
    }
  }
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / l[g];
    for (int d = 0; d < hd; ++d) out[g * hd + d] *= inv;
  }
}

// Widens one cached row to f32 (F16C for f16: the build baseline has it).
void load_row(DType t, const uint8_t* src, float* dst, int n) {
  if (t == DType::F32) {
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  int i = 0;
  if (t == DType::F16) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) dst[i] = f16_to_f32(h[i]);
  } else {
    for (; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
  }
}

// Scratch for the reduced-precision path, reused across the units of one thread.
struct Scratch {
  std::vector<float> q, row, scores;
};

// One (token, kv head) unit with a half-precision cache and/or reduced-precision activations
// (see the header). Each K and V row is widened once for the whole query group.
void attend_group_rounded(const float* q_in, const CacheRows& rows, int32_t pos, int group, int hd,
                          float scale, DType act, float* out, Scratch& s) {
  const DType op = rows.c.dtype;
  const int64_t len = int64_t(pos) + 1;
  s.q.assign(q_in, q_in + int64_t(group) * hd);
  round_to(op, s.q.data(), int64_t(group) * hd);
  s.row.resize(hd);
  s.scores.resize(size_t(group) * len);
  for (int32_t j = 0; j <= pos; ++j) {
    load_row(op, rows.at(rows.c.k, j), s.row.data(), hd);
    for (int g = 0; g < group; ++g) {
      const float* qg = s.q.data() + g * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qg[d] * s.row[d];
      s.scores[g * len + j] = round_to(act, round_to(act, dot) * scale);
    }
  }
  const DType p_dtype = act != DType::F32 ? act : op;
  for (int g = 0; g < group; ++g) {
    float* sc = s.scores.data() + g * len;
    const float mx = *std::max_element(sc, sc + len);
    float sum = 0.0f;
    for (int64_t j = 0; j < len; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < len; ++j) sc[j] = round_to(p_dtype, sc[j] * inv);
  }
  std::fill(out, out + int64_t(group) * hd, 0.0f);
  for (int32_t j = 0; j <= pos; ++j) {
    load_row(op, rows.at(rows.c.v, j), s.row.data(), hd);
    for (int g = 0; g < group; ++g) {
      const float p = s.scores[g * len + j];
      float* og = out + g * hd;
      for (int d = 0; d < hd; ++d) og[d] += p * s.row[d];
    }
  }
  round_to(act, out, int64_t(group) * hd);
}

}  // namespace

void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch) {
  const int64_t row = int64_t(cache.num_kv_heads) * cache.head_dim;
  const int64_t row_bytes = row * int64_t(elem_size(cache.dtype));
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    KCHECK(slot >= 0 && slot < cache.num_blocks * cache.block_size, "slot {} out of range", slot);
    store_row(cache.dtype, k + t * row, static_cast<uint8_t*>(cache.k) + slot * row_bytes, row);
    store_row(cache.dtype, v + t * row, static_cast<uint8_t*>(cache.v) + slot * row_bytes, row);
  }
}

void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                     int num_heads, float scale, float* out, ThreadPool& pool, DType act) {
  const int kvh = cache.num_kv_heads;
  const int hd = cache.head_dim;
  KCHECK(num_heads % kvh == 0, "heads {} not a multiple of kv heads {}", num_heads, kvh);
  KCHECK(cache.dtype == DType::F32 || cache.dtype == DType::F16 || cache.dtype == DType::BF16,
         "unsupported KV cache dtype {}", dtype_name(cache.dtype));
  const int group = num_heads / kvh;
  const bool exact_f32 = cache.dtype == DType::F32 && act == DType::F32;
  // Map each token to its sequence once.
  std::vector<int32_t> seq_of(batch.num_tokens);
  for (int s = 0; s < batch.num_seqs; ++s)
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) seq_of[t] = s;
  const int64_t units = batch.num_tokens * kvh;
  pool.parallel_for(units, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> m(group), l(group);
    Scratch scratch;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t = u / kvh;
      const int h = int(u % kvh);
      const CacheRows rows{cache,
                           batch.block_tables + int64_t(seq_of[t]) * batch.max_blocks_per_seq, h};
      const int64_t off = (t * num_heads + int64_t(h) * group) * hd;
      if (exact_f32) {
        attend_group_f32(q + off, rows, batch.positions[t], group, hd, scale, out + off, m.data(),
                         l.data());
      } else {
        attend_group_rounded(q + off, rows, batch.positions[t], group, hd, scale, act, out + off,
                             scratch);
      }
    }
  });
}

}  // namespace kestrel::cpu
