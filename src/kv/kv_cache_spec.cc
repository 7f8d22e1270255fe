#include "kv/kv_cache_spec.h"

namespace kestrel {

int64_t KVCacheSpec::bytes_per_block() const {
  // K and V are stored separately except for MLA, whose latent stands for both.
  const int64_t planes = kind == KVCacheKind::kMlaLatent ? 1 : 2;
  return planes * num_layers * int64_t{block_size} * num_kv_heads * head_dim * dtype_bytes;
}

Expected<int64_t> num_blocks_for_budget(std::span<const KVCacheSpec> groups, int64_t budget_bytes) {
  if (groups.empty()) return make_error("KV cache: no layer groups to size");
  if (budget_bytes < 0) return make_error("KV cache: negative memory budget {}", budget_bytes);
  int64_t bytes_per_block = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const KVCacheSpec& g = groups[i];
    if (g.kind == KVCacheKind::kLinearAttentionState) {
      return make_error("KV cache group {}: linear-attention state is not block-paged", i);
    }
    if (g.num_layers <= 0 || g.block_size <= 0 || g.num_kv_heads <= 0 || g.head_dim <= 0 ||
        g.dtype_bytes <= 0) {
      return make_error(
          "KV cache group {}: layers {}, block size {}, kv heads {}, head dim {}, dtype bytes {} "
          "must all be positive",
          i, g.num_layers, g.block_size, g.num_kv_heads, g.head_dim, g.dtype_bytes);
    }
    if (g.block_size != groups[0].block_size) {
      return make_error("KV cache group {}: block size {} differs from group 0's {}", i,
                        g.block_size, groups[0].block_size);
    }
    bytes_per_block += g.bytes_per_block();
  }
  return budget_bytes / bytes_per_block;
}

}  // namespace kestrel
