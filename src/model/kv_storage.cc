#include "model/causal_lm.h"

namespace kestrel {

KVCacheStorage::KVCacheStorage(int num_layers, int64_t num_blocks, int block_size, int num_kv_heads,
                               int head_dim, DType dtype, bool latent)
    : buffer_(dtype, Shape{int64_t(num_layers) * (latent ? 1 : 2) * num_blocks * block_size *
                           int64_t(num_kv_heads) * head_dim}),
      dtype_(dtype),
      num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      latent_(latent) {}

KVLayer KVCacheStorage::layer(int i) const {
  KCHECK(i >= 0 && i < num_layers_, "layer {} out of range", i);
  KCHECK(!latent_, "a latent (MLA) cache has no separate K and V");
  const int64_t per = num_blocks_ * block_size_ * int64_t(num_kv_heads_) * head_dim_;
  const size_t per_bytes = dtype_bytes(dtype_, per);
  auto* base = static_cast<uint8_t*>(const_cast<void*>(buffer_.view().data));
  KVLayer l;
  l.k = base + 2 * size_t(i) * per_bytes;
  l.v = base + (2 * size_t(i) + 1) * per_bytes;
  l.dtype = dtype_;
  l.num_blocks = num_blocks_;
  l.block_size = block_size_;
  l.num_kv_heads = num_kv_heads_;
  l.head_dim = head_dim_;
  return l;
}

MlaCacheLayer KVCacheStorage::mla_layer(int i, int latent_dim) const {
  KCHECK(i >= 0 && i < num_layers_, "layer {} out of range", i);
  KCHECK(latent_ && latent_dim > 0 && latent_dim <= head_dim_,
         "latent width {} does not fit this cache (latent {}, row width {})", latent_dim, latent_,
         head_dim_);
  const size_t per_bytes = dtype_bytes(dtype_, num_blocks_ * block_size_ * int64_t(head_dim_));
  MlaCacheLayer l;
  l.data = static_cast<uint8_t*>(const_cast<void*>(buffer_.view().data)) + size_t(i) * per_bytes;
  l.dtype = dtype_;
  l.num_blocks = num_blocks_;
  l.block_size = block_size_;
  l.latent_dim = latent_dim;
  l.rope_dim = head_dim_ - latent_dim;
  return l;
}

}  // namespace kestrel
