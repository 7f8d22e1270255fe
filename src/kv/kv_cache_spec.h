// kv/kv_cache_spec.h — the shape of one group of layers' KV cache, and pool sizing.
// Every group draws its blocks from one shared BlockPool: a block id names the same slot in every
// layer of every group, so one block costs the sum of the groups' bytes_per_block().
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace kestrel {

enum class KVCacheKind {
  kFullAttention,
  // Reserved seams; bytes_per_block() already prices them, the manager does not use them yet.
  kSlidingWindow,         // same layout as full attention; prefix hits replay the last window.
  kMlaLatent,             // one compressed latent per token (num_kv_heads = 1, no separate V).
  kLinearAttentionState,  // fixed-size recurrent state, not token-paged: not sizable per block.
};

struct KVCacheSpec {
  KVCacheKind kind = KVCacheKind::kFullAttention;
  int32_t num_layers = 1;   // layers in this group
  int32_t block_size = 16;  // tokens per block
  int32_t num_kv_heads = 1;
  int32_t head_dim = 1;
  int32_t dtype_bytes = 2;

  // Bytes one block occupies across all layers of the group (K and V for attention kinds).
  int64_t bytes_per_block() const;
};

// How many blocks of one shared pool fit in `budget_bytes` for these groups. Errors when the list
// is empty, a spec is malformed or not token-paged, or block sizes differ.
Expected<int64_t> num_blocks_for_budget(std::span<const KVCacheSpec> groups, int64_t budget_bytes);

}  // namespace kestrel
