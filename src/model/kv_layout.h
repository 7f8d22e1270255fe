// model/kv_layout.h — a model's KV cache specs: what each layer caches per token (full or
// sliding-window attention, MLA latents) or per sequence (a linear-attention layer's recurrent
// state), and how the layers group over one block pool and the state slots.
#pragma once

#include "kv/kv_cache_spec.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace kestrel {

// The cache of hidden layer `layer` (-1: a full-attention layer of the model's shape, as MTP
// modules are) in blocks of `block_size` tokens stored as `dtype`.
KVCacheSpec layer_kv_cache_spec(const ModelConfig& c, DType dtype, int block_size, int64_t layer);

// plan_kv_cache_layout over every hidden layer's spec: one group for a model without sliding
// windows, else groups of equal size per kind (e.g. Qwen2 with 1 full and 2 sliding layers:
// three groups of one layer).
KVCacheLayout model_kv_cache_layout(const ModelConfig& c, DType dtype, int block_size);

}  // namespace kestrel
