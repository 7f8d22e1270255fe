// backend/cpu/paged_attention.h — causal attention over a paged KV cache.
// The cache of one layer is [num_blocks, num_kv_heads, block_size, head_dim] for K and for V, in
// f32, f16, bf16 or a quantized row format (KVLayer, kv_row_index, cache_rows.h); a sequence's
// token at position p lives in block
// block_table[p / block_size], row p % block_size.
#pragma once

#include <cstdint>

#include "backend/cpu/rope.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

// Stores the new tokens' K and V ([num_tokens, num_kv_heads, head_dim], f32) at their slots,
// converted to the cache's row format (round to nearest even; quantized: cache_rows.h). With
// rope_k, each K row is rotated (apply_rope at batch.positions) on its way into the cache — one
// pass over K instead of two; k itself is left as it was. `scratch`: the calling thread's arena
// (thread_scratch.h); null: buffers of this call's own.
void write_kv(const KVLayer& cache, const float* k, const float* v, const AttentionBatch& batch,
              const RopeParams* rope_k = nullptr, ScratchArena* scratch = nullptr);

// out[t, h, :] = softmax(q[t,h]·K[lo..pos_t]ᵀ·scale)·V for each token t (keys of its own sequence
// up to and including its position, from lo = 0 or, with batch.sliding_window W > 0, from
// lo = max(0, pos_t - W + 1): keys before lo are never read, so their blocks may be gone); q and
// out are [num_tokens, num_heads, head_dim] f32.
// Query head h reads KV head h / (num_heads / num_kv_heads).
// Precision: with an f16/bf16 cache the two products take operands of the cache dtype, as a
// half-precision GEMM does — q is rounded for Q·Kᵀ and the normalized probabilities for P·V —
// with f32 accumulation. A quantized cache's rows are dequantized to f32 and q and p stay in
// act. With act = BF16/F16 (a model whose activations are that dtype) the
// scores, scaled scores and the output are also rounded to it, as an eager reference computes.
// Every query's arithmetic (order of sums included) depends only on its own position and data,
// never on the other tokens of the batch or the thread split, so results are batch-invariant.
// `scratch`: pool's arenas (thread_scratch.h); null: buffers of this call's own.
void paged_attention(const float* q, const KVLayer& cache, const AttentionBatch& batch,
                     int num_heads, float scale, float* out, ThreadPool& pool,
                     DType act = DType::F32, ThreadScratch* scratch = nullptr);

}  // namespace kestrel::cpu
