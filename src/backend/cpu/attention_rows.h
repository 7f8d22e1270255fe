// backend/cpu/attention_rows.h — row helpers the attention kernels share: the softmax of one
// row of scores and the walk over a batch's query tiles (the cache's row formats:
// cache_rows.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/cache_rows.h"
#include "backend/cpu/paged_attention.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

inline int64_t round_up8(int64_t n) {
  return (n + 7) & ~int64_t(7);
}

// Calls fn(seq, t0, t1) for every tile of at most `tile` consecutive query tokens of each
// sequence, in batch order: the units the attention kernels split over threads.
template <typename Fn>
void for_each_query_tile(const AttentionBatch& batch, int tile, Fn&& fn) {
  for (int s = 0; s < batch.num_seqs; ++s)
    for (int64_t t0 = batch.query_start_loc[s]; t0 < batch.query_start_loc[s + 1]; t0 += tile)
      fn(s, t0, std::min<int64_t>(t0 + tile, batch.query_start_loc[s + 1]));
}

// In place: softmax over sc[0..n) (exact max, exp and sum in blocks of eight, the same order
// whatever n is padded to), the probabilities rounded to p_dtype; sc[n..round_up8(n)) is filled
// with -inf first so those lanes come out 0.
void softmax_row(float* sc, int64_t n, DType p_dtype);
// The same with a sink logit in the softmax that takes no value: p_j = e^(s_j − m) / (Σ_i
// e^(s_i − m) + e^(sink − m)), m the largest of the scores and the sink.
void softmax_row_with_sink(float* sc, int64_t n, float sink, DType p_dtype);

}  // namespace kestrel::cpu
