// model/causal_lm.h — the contract between a model and whoever batches for it (CLI now, the
// model runner later): a flat batch of tokens from several sequences in, logits of chosen rows out.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/paged_attention.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace kestrel {

struct ForwardBatch {
  std::span<const int32_t> token_ids;        // [T]
  std::span<const int32_t> positions;        // [T]
  std::span<const int64_t> slot_mapping;     // [T] KV slot of each token
  std::span<const int32_t> query_start_loc;  // [S + 1]
  std::span<const int32_t> block_tables;     // [S, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  std::span<const int32_t> logits_indices;  // rows of T whose logits are wanted
};

// KV storage for every layer: one allocation, [layers][K|V][blocks, block_size, kv_heads, hd]
// of `dtype` (F32, F16 or BF16).
class KVCacheStorage {
 public:
  KVCacheStorage(int num_layers, int64_t num_blocks, int block_size, int num_kv_heads, int head_dim,
                 DType dtype);
  cpu::KVLayer layer(int i) const;
  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  size_t bytes() const { return buffer_.nbytes(); }

 private:
  HostBuffer buffer_;
  DType dtype_;
  int num_layers_;
  int64_t num_blocks_;
  int block_size_;
  int num_kv_heads_;
  int head_dim_;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Writes [logits_indices.size(), vocab] f32 logits into `logits`.
  virtual void forward(const ForwardBatch& batch, KVCacheStorage& kv, float* logits) = 0;
  // Bytes of weights read by one decode step (for bandwidth figures).
  virtual size_t weight_bytes() const = 0;
  // The dtype KV caches of this model are stored in (--kv-cache-dtype).
  virtual DType kv_cache_dtype() const = 0;
  // Builds KV storage sized for this model.
  KVCacheStorage make_kv_cache(int64_t num_blocks, int block_size) const {
    const auto& c = config();
    return KVCacheStorage(int(c.num_hidden_layers), num_blocks, block_size,
                          int(c.num_key_value_heads), int(c.head_dim), kv_cache_dtype());
  }
};

}  // namespace kestrel
