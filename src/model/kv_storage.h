// model/kv_storage.h — the memory of a paged KV cache: one allocation for every block of the
// pool, laid out as a KVCacheLayout says (kv/kv_cache_spec.h). Each block holds
// layers_per_block storage slots; a model layer reads slot place(layer).index of the blocks in
// its group's table. Owned by whoever runs the model (the model runner, the CLI); only the
// thread running forward passes touches the bytes.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "kv/kv_cache_spec.h"
#include "tensor/tensor.h"

namespace kestrel {

// Attention caches: [slots][K|V][blocks, block_size, kv_heads, head_dim]. Latent (MLA) caches
// keep one row per token that stands for both K and V: [slots][blocks, block_size, head_dim]
// with head_dim = kv_lora_rank + rope width and num_kv_heads = 1.
class KVCacheStorage {
 public:
  // Every group of `layout` must have the same per-layer shape (plan_kv_cache_layout checks);
  // `dtype` is F32, F16 or BF16.
  KVCacheStorage(KVCacheLayout layout, int64_t num_blocks, DType dtype);
  // The cache of model layer i.
  KVLayer layer(int i) const;
  // Layer i of a latent cache whose rows are [latent_dim | head_dim - latent_dim].
  MlaCacheLayer mla_layer(int i, int latent_dim) const;
  const KVCacheLayout& layout() const { return layout_; }
  LayerPlace place(int layer) const;
  int num_groups() const { return int(layout_.groups.size()); }
  bool latent() const { return latent_; }
  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return layout_.block_size(); }
  size_t bytes() const { return buffer_.nbytes(); }

 private:
  KVCacheLayout layout_;
  int64_t num_blocks_;
  bool latent_;
  HostBuffer buffer_;
  DType dtype_;
};

}  // namespace kestrel
