// kv/kv_cache_spec.h — the shape of one group of layers' KV cache, and how a model's layers form
// groups over one shared block pool (KVCacheLayout). After vLLM's hybrid allocator: every group
// has the same number of layers (layers_per_block), a block id belongs to one group at a time,
// and layer `index` of every group shares storage slot `index`, so one block costs
// layers_per_block layers' bytes whatever group holds it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kestrel {

enum class KVCacheKind {
  kFullAttention,
  kSlidingWindow,  // same layout as full attention; blocks out of the window are freed
  kMlaLatent,      // one compressed latent per token (num_kv_heads = 1, no separate V)
  // A linear-attention layer's fixed-size recurrent state per sequence (state_floats f32
  // values): not token-paged, so it lives in state slots beside the block pool.
  kLinearAttentionState,
};

struct KVCacheSpec {
  KVCacheKind kind = KVCacheKind::kFullAttention;
  int32_t num_layers = 1;   // layers in this group
  int32_t block_size = 16;  // tokens per block
  int32_t num_kv_heads = 1;
  int32_t head_dim = 1;
  int32_t row_bytes = 2;  // one token's row of one KV head: head_dim values in the cache's format
  // kSlidingWindow: a query at position p attends to keys p - sliding_window < j <= p.
  int32_t sliding_window = 0;
  // kLinearAttentionState: f32 values of one sequence's state in this layer.
  int64_t state_floats = 0;

  // Bytes one block occupies across all layers of the group (K and V for attention kinds).
  int64_t bytes_per_block() const;
  // The same layer cache (everything but num_layers).
  bool same_layer_as(const KVCacheSpec& o) const;
};

// Where a model layer's cache lives: its group (whose block table it reads) and its storage
// slot within every block.
struct LayerPlace {
  int32_t group = 0;
  int32_t index = 0;
  bool operator==(const LayerPlace&) const = default;
};

// The linear-attention layers' states: one slot per running sequence holds every such layer's
// state (floats_per_layer f32 values each), apart from the block pool.
struct RecurrentStateLayout {
  int32_t num_layers = 0;
  int64_t floats_per_layer = 0;
  int64_t bytes_per_slot() const { return int64_t(num_layers) * floats_per_layer * 4; }
};

struct KVCacheLayout {
  std::vector<KVCacheSpec> groups;                 // num_layers = the group's own layers
  std::vector<std::vector<int32_t>> group_layers;  // model layers of each group
  // Per model layer; a linear-attention layer's is {kStateGroup, its index among them}.
  std::vector<LayerPlace> layers;
  int32_t layers_per_block = 0;  // storage slots per block
  RecurrentStateLayout state;
  static constexpr int32_t kStateGroup = -1;

  int32_t block_size() const { return groups.empty() ? 0 : groups[0].block_size; }
  // Bytes one block occupies: layers_per_block layers of the (common) per-layer shape.
  int64_t bytes_per_block() const;
};

// Blocks one request of `max_len` tokens holds at most across `groups` when a step computes up
// to `max_step_tokens` of its tokens: every full-attention block, a window plus a step for a
// sliding window.
int64_t max_blocks_per_request(std::span<const KVCacheSpec> groups, int64_t max_len,
                               int64_t max_step_tokens);

// Groups layers with the same spec (each of num_layers 1), in order of first appearance, into
// groups of as many layers as the rarest spec has (the last group of a spec may be smaller);
// linear-attention layers go to the state layout instead. Errors when no layer is token-paged,
// a spec is malformed, block sizes differ, two specs' layers differ in bytes per block (the
// pool's blocks are one size) or two linear-attention layers in state size.
Expected<KVCacheLayout> plan_kv_cache_layout(std::span<const KVCacheSpec> per_layer);

// The layout of `num_layers` layers of one spec (one group).
KVCacheLayout uniform_kv_cache_layout(const KVCacheSpec& layer, int32_t num_layers);

// How many blocks of the shared pool fit in `budget_bytes`.
int64_t num_blocks_for_budget(const KVCacheLayout& layout, int64_t budget_bytes);

}  // namespace kestrel
