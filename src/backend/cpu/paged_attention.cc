#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/status.h"

namespace kestrel::cpu {

void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch) {
  const int64_t row = int64_t(cache.num_kv_heads) * cache.head_dim;
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    KCHECK(slot >= 0 && slot < cache.num_blocks * cache.block_size, "slot {} out of range", slot);
    std::memcpy(cache.k + slot * row, k + t * row, row * sizeof(float));
    std::memcpy(cache.v + slot * row, v + t * row, row * sizeof(float));
  }
}

namespace {

// One (token, kv head) unit: the whole query group of that KV head attends together so every
// K/V row read from the cache serves all of the group's heads. Online softmax keeps one pass.
void attend_group(const float* q, const KVLayer& c, const int32_t* block_table, int32_t pos,
                  int group, int head_dim, float scale, int kv_head, float* out, float* m,
                  float* l) {
  const int64_t row = int64_t(c.num_kv_heads) * head_dim;
  for (int g = 0; g < group; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0.0f;
    std::fill(out + g * head_dim, out + (g + 1) * head_dim, 0.0f);
  }
  for (int32_t j = 0; j <= pos; ++j) {
    const int64_t slot = int64_t(block_table[j / c.block_size]) * c.block_size + j % c.block_size;
    const float* kr = c.k + slot * row + int64_t(kv_head) * head_dim;
    const float* vr = c.v + slot * row + int64_t(kv_head) * head_dim;
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * head_dim;
      float s = 0.0f;
      for (int d = 0; d < head_dim; ++d) s += qg[d] * kr[d];
      s *= scale;
      float* og = out + g * head_dim;
      if (s > m[g]) {
        const float corr = std::exp(m[g] - s);
        l[g] *= corr;
        for (int d = 0; d < head_dim; ++d) og[d] *= corr;
        m[g] = s;
      }
      const float p = std::exp(s - m[g]);
      l[g] += p;
      for (int d = 0; d < head_dim; ++d) og[d] += p * vr[d];
    }
  }
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / l[g];
    for (int d = 0; d < head_dim; ++d) out[g * head_dim + d] *= inv;
  }
}

// The reduced-precision emulation: scores kept for the whole row, softmax in f32 over the
// rounded scaled scores, probabilities rounded before the weighted sum of V.
void attend_head_rounded(const float* q, const KVLayer& c, const int32_t* block_table, int32_t pos,
                         int head_dim, float scale, int kv_head, DType act, float* out,
                         std::vector<float>& scores) {
  const int64_t row = int64_t(c.num_kv_heads) * head_dim;
  auto slot_of = [&](int32_t j) {
    return int64_t(block_table[j / c.block_size]) * c.block_size + j % c.block_size;
  };
  scores.resize(size_t(pos) + 1);
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j <= pos; ++j) {
    const float* kr = c.k + slot_of(j) * row + int64_t(kv_head) * head_dim;
    float s = 0.0f;
    for (int d = 0; d < head_dim; ++d) s += q[d] * kr[d];
    scores[j] = round_to(act, round_to(act, s) * scale);
    mx = std::max(mx, scores[j]);
  }
  float sum = 0.0f;
  for (auto& s : scores) sum += (s = std::exp(s - mx));
  std::fill(out, out + head_dim, 0.0f);
  for (int32_t j = 0; j <= pos; ++j) {
    const float p = round_to(act, scores[j] / sum);
    const float* vr = c.v + slot_of(j) * row + int64_t(kv_head) * head_dim;
    for (int d = 0; d < head_dim; ++d) out[d] += p * vr[d];
  }
  round_to(act, out, head_dim);
}

}  // namespace

void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                     int num_heads, float scale, float* out, ThreadPool& pool, DType act) {
  const int kvh = cache.num_kv_heads;
  const int hd = cache.head_dim;
  KCHECK(num_heads % kvh == 0, "heads {} not a multiple of kv heads {}", num_heads, kvh);
  const int group = num_heads / kvh;
  // Map each token to its sequence once.
  std::vector<int32_t> seq_of(batch.num_tokens);
  for (int s = 0; s < batch.num_seqs; ++s)
    for (int32_t t = batch.query_start_loc[s]; t < batch.query_start_loc[s + 1]; ++t) seq_of[t] = s;
  const int64_t units = batch.num_tokens * kvh;
  pool.parallel_for(units, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> m(group), l(group), scores;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t = u / kvh;
      const int h = int(u % kvh);
      const int32_t* bt = batch.block_tables + int64_t(seq_of[t]) * batch.max_blocks_per_seq;
      const int64_t off = (t * num_heads + int64_t(h) * group) * hd;
      if (act == DType::F32) {
        attend_group(q + off, cache, bt, batch.positions[t], group, hd, scale, h, out + off,
                     m.data(), l.data());
      } else {
        for (int g = 0; g < group; ++g)
          attend_head_rounded(q + off + g * hd, cache, bt, batch.positions[t], hd, scale, h, act,
                              out + off + g * hd, scores);
      }
    }
  });
}

}  // namespace kestrel::cpu
