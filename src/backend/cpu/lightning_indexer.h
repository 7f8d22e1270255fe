// backend/cpu/lightning_indexer.h — DeepSeek-V3.2's lightning indexer (DeepSeek Sparse
// Attention): the keys it keeps at the end of each latent-cache row, and each query's top-k
// choice of the keys it attends to (Backend::indexer_top_k says what is computed).
#pragma once

#include <cstdint>

#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {

// keys [num_tokens, cache.index_dim] f32, stored in the cache's format after each token's
// [latent | rope] part.
void write_indexer_keys(const MlaCacheLayer& cache, const float* keys, const AttentionBatch& batch);

// Each dot product is eight-lane partial sums in dimension order reduced by a fixed tree, the
// head sum runs in head order, and the choice orders by (score descending, position
// ascending): the result is one function of the token and its keys on every ISA and thread
// count.
void indexer_top_k(const float* q, const float* w, const MlaCacheLayer& cache,
                   const AttentionBatch& batch, int num_heads, float scale, int top_k,
                   int32_t* selected, ThreadPool& pool, ThreadScratch& scratch);

}  // namespace kestrel::cpu
