// backend/cpu/mla_attention.h — multi-head latent attention (DeepSeek-V2/V3 MLA) over a paged
// cache of compressed latents, in the absorbed form (models.md §4.5).
//
// Each cached token is one row [c | kpe]: the normalized latent c (latent_dim = kv_lora_rank)
// and the roped shared key kpe (rope_dim). Attention is MQA with a single KV head whose key is
// [c | kpe] and whose value is c; W_UK is folded into the query beforehand and W_UV is applied
// to the latent output afterwards, so the cache never holds per-head keys or values.
#pragma once

#include <cstdint>

#include "backend/cpu/paged_attention.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

// The cache (MlaCacheLayer, backend/ops.h): an f32 cache whose widths are multiples of 8 is read
// in place: give it 64-byte aligned data (as Tensor does) and row sizes that are multiples of 64
// bytes (V3: 576 floats), or loads split across lines.

// Stores each token's latent ([num_tokens, latent_dim] f32) and roped key
// ([num_tokens, rope_dim] f32) at its slot, converted to the cache dtype (round to nearest even).
void write_mla_cache(const MlaCacheLayer& cache, const float* latent, const float* k_rope,
                     const AttentionBatch& batch);

// out[t, h, :] (latent_dim wide) = Σ_j p_j · c_j with
// p = softmax_j(scale · (q_lat[t,h]·c_j + q_rope[t,h]·kpe_j)) over the keys j ≤ pos_t of t's
// sequence. q_lat: [num_tokens, num_heads, latent_dim] (W_UK already folded in); q_rope:
// [num_tokens, num_heads, rope_dim]; out: [num_tokens, num_heads, latent_dim]; all f32.
// The score is one dot product over the concatenation [q_lat | q_rope]·[c | kpe].
// Precision and batch invariance follow paged_attention: with an f16/bf16 cache, q and the
// probabilities are rounded to the cache dtype (f32 accumulation); with act = F16/BF16 the
// scores, scaled scores, probabilities and output are rounded to act. A query's arithmetic
// depends only on its own position and data, never on the batch or the thread split.
// `scratch`: pool's arenas (thread_scratch.h); null: buffers of this call's own.
void mla_attention(const float* q_lat, const float* q_rope, const MlaCacheLayer& cache,
                   const AttentionBatch& batch, int num_heads, float scale, float* out,
                   ThreadPool& pool, DType act = DType::F32, ThreadScratch* scratch = nullptr);

}  // namespace kestrel::cpu
