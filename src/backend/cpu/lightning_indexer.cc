#include "backend/cpu/lightning_indexer.h"

#include <immintrin.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/cache_rows.h"
#include "backend/cpu/simd_math.h"
#include "base/status.h"

namespace kestrel::cpu {
namespace {

// A thread's buffers, grown as needed and reused across calls.
struct IndexerScratch {
  std::vector<float> key;      // one key widened to f32, padded to a multiple of 8
  std::vector<float> query;    // the token's heads, each padded like the key
  std::vector<float> scores;   // I(t, j) for j ≤ p
  std::vector<int32_t> order;  // candidate positions
};

void check_cache(const MlaCacheLayer& c) {
  KCHECK(c.index_dim > 0, "this latent cache keeps no indexer keys");
  KCHECK(c.dtype == DType::F32 || c.dtype == DType::F16 || c.dtype == DType::BF16,
         "indexer keys in a {} cache are not supported (float caches are)", dtype_name(c.dtype));
}

const uint8_t* key_row(const MlaCacheLayer& c, const int32_t* table, int64_t j) {
  const int64_t slot = int64_t(table[j / c.block_size]) * c.block_size + j % c.block_size;
  const size_t es = cache_row_bytes(c.dtype, 1);
  return static_cast<const uint8_t*>(c.data) +
         (size_t(slot * c.row_elems()) + size_t(c.latent_dim + c.rope_dim)) * es;
}

// Σ over d < n (a multiple of 8) of a[d]·b[d]: eight lanes in dimension order, then a fixed tree.
float dot8(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < n; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  return simd::hsum8(acc);
}

void select_for_token(const float* q, const float* w, const MlaCacheLayer& c, const int32_t* table,
                      int64_t pos, int num_heads, float scale, int top_k, int32_t* out,
                      IndexerScratch& s) {
  const int64_t n = pos + 1;
  if (n <= top_k) {
    std::iota(out, out + n, 0);
    std::fill(out + n, out + top_k, -1);
    return;
  }
  const int64_t dp = round_up8(c.index_dim);
  s.key.resize(size_t(dp));
  s.query.assign(size_t(num_heads * dp), 0.0f);
  for (int h = 0; h < num_heads; ++h)
    std::copy_n(q + int64_t(h) * c.index_dim, c.index_dim, s.query.data() + h * dp);
  s.scores.resize(size_t(n));
  const CacheRowCodec codec{c.dtype, nullptr, nullptr, 1.0f};
  for (int64_t j = 0; j < n; ++j) {
    widen_cache_row(codec, key_row(c, table, j), s.key.data(), c.index_dim);
    float score = 0.0f;
    for (int h = 0; h < num_heads; ++h) {
      const float d = dot8(s.query.data() + h * dp, s.key.data(), dp) * scale;
      score += w[h] * std::max(d, 0.0f);
    }
    s.scores[size_t(j)] = score;
  }
  s.order.resize(size_t(n));
  std::iota(s.order.begin(), s.order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) {
    const float x = s.scores[size_t(a)], y = s.scores[size_t(b)];
    return x > y || (x == y && a < b);
  };
  std::nth_element(s.order.begin(), s.order.begin() + (top_k - 1), s.order.end(), before);
  std::sort(s.order.begin(), s.order.begin() + top_k);
  std::copy_n(s.order.begin(), top_k, out);
}

}  // namespace

void write_indexer_keys(const MlaCacheLayer& cache, const float* keys,
                        const AttentionBatch& batch) {
  check_cache(cache);
  const CacheRowCodec codec{cache.dtype, nullptr, nullptr, 1.0f};
  const size_t es = cache_row_bytes(cache.dtype, 1);
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    KCHECK(slot >= 0 && slot < cache.num_blocks * cache.block_size, "slot {} out of range", slot);
    uint8_t* dst =
        static_cast<uint8_t*>(cache.data) +
        (size_t(slot * cache.row_elems()) + size_t(cache.latent_dim + cache.rope_dim)) * es;
    store_cache_row(codec, keys + t * cache.index_dim, dst, cache.index_dim);
  }
}

void indexer_top_k(const float* q, const float* w, const MlaCacheLayer& cache,
                   const AttentionBatch& batch, int num_heads, float scale, int top_k,
                   int32_t* selected, ThreadPool& pool, ThreadScratch& scratch) {
  check_cache(cache);
  KCHECK(num_heads > 0 && top_k > 0, "indexer: {} heads, top {}", num_heads, top_k);
  std::vector<int> seq_of(size_t(batch.num_tokens));
  for (int s = 0; s < batch.num_seqs; ++s)
    std::fill(seq_of.begin() + batch.query_start_loc[s],
              seq_of.begin() + batch.query_start_loc[s + 1], s);
  pool.parallel_for(batch.num_tokens, 1, [&](int64_t begin, int64_t end, int thread) {
    IndexerScratch& s = scratch[thread].get<IndexerScratch>();
    for (int64_t t = begin; t < end; ++t) {
      const int32_t* table =
          batch.block_tables + int64_t(seq_of[size_t(t)]) * batch.max_blocks_per_seq;
      select_for_token(q + t * num_heads * cache.index_dim, w + t * num_heads, cache, table,
                       batch.positions[t], num_heads, scale, top_k, selected + t * top_k, s);
    }
  });
}

}  // namespace kestrel::cpu
