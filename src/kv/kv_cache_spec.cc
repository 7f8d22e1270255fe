#include "kv/kv_cache_spec.h"

#include <algorithm>

namespace kestrel {

int64_t KVCacheSpec::bytes_per_block() const {
  // K and V are stored separately except for MLA, whose latent stands for both.
  const int64_t planes = kind == KVCacheKind::kMlaLatent ? 1 : 2;
  return planes * num_layers * int64_t{block_size} * num_kv_heads * row_bytes;
}

bool KVCacheSpec::same_layer_as(const KVCacheSpec& o) const {
  return kind == o.kind && block_size == o.block_size && num_kv_heads == o.num_kv_heads &&
         head_dim == o.head_dim && row_bytes == o.row_bytes && sliding_window == o.sliding_window;
}

int64_t KVCacheLayout::bytes_per_block() const {
  if (groups.empty()) return 0;
  KVCacheSpec layer = groups[0];
  layer.num_layers = layers_per_block;
  return layer.bytes_per_block();
}

int64_t max_blocks_per_request(std::span<const KVCacheSpec> groups, int64_t max_len,
                               int64_t max_step_tokens) {
  int64_t total = 0;
  for (const KVCacheSpec& g : groups) {
    const int64_t bs = g.block_size;
    const int64_t all = (max_len + bs - 1) / bs;
    // Live keys of a step: the window before its first query, then its own tokens; +1 for a
    // span that starts mid-block.
    const int64_t window = g.kind == KVCacheKind::kSlidingWindow
                               ? (g.sliding_window - 1 + max_step_tokens + bs - 1) / bs + 1
                               : all;
    total += std::min(all, window);
  }
  return total;
}

Expected<KVCacheLayout> plan_kv_cache_layout(std::span<const KVCacheSpec> per_layer) {
  const auto paged = std::find_if(per_layer.begin(), per_layer.end(), [](const KVCacheSpec& s) {
    return s.kind != KVCacheKind::kLinearAttentionState;
  });
  if (paged == per_layer.end()) return make_error("KV cache: no token-paged layers to lay out");
  const KVCacheSpec& first_paged = *paged;
  std::vector<KVCacheSpec> kinds;
  std::vector<std::vector<int32_t>> kind_layers;
  KVCacheLayout out;
  out.layers.resize(per_layer.size());
  for (size_t i = 0; i < per_layer.size(); ++i) {
    const KVCacheSpec& s = per_layer[i];
    if (s.kind == KVCacheKind::kLinearAttentionState) {
      if (s.state_floats <= 0)
        return make_error("KV cache layer {}: a linear-attention state of {} values", i,
                          s.state_floats);
      if (out.state.num_layers > 0 && s.state_floats != out.state.floats_per_layer)
        return make_error("KV cache layer {}: a state of {} values, other linear layers have {}", i,
                          s.state_floats, out.state.floats_per_layer);
      out.state.floats_per_layer = s.state_floats;
      out.layers[i] = LayerPlace{KVCacheLayout::kStateGroup, out.state.num_layers++};
      continue;
    }
    if (s.num_layers != 1 || s.block_size <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 ||
        s.row_bytes <= 0 || (s.kind == KVCacheKind::kSlidingWindow && s.sliding_window <= 0))
      return make_error(
          "KV cache layer {}: layers {}, block size {}, kv heads {}, head dim {}, row bytes {}, "
          "sliding window {} are not a layer's cache",
          i, s.num_layers, s.block_size, s.num_kv_heads, s.head_dim, s.row_bytes, s.sliding_window);
    if (s.block_size != first_paged.block_size)
      return make_error("KV cache layer {}: block size {} differs from the first layer's {}", i,
                        s.block_size, first_paged.block_size);
    if (s.bytes_per_block() != first_paged.bytes_per_block())
      return make_error(
          "KV cache layer {}: {} bytes per block, the first layer has {}; layers of different "
          "cache shapes cannot share one block pool",
          i, s.bytes_per_block(), first_paged.bytes_per_block());
    const auto k = std::find_if(kinds.begin(), kinds.end(),
                                [&](const KVCacheSpec& o) { return o.same_layer_as(s); });
    if (k == kinds.end()) {
      kinds.push_back(s);
      kind_layers.push_back({int32_t(i)});
    } else {
      kind_layers[size_t(k - kinds.begin())].push_back(int32_t(i));
    }
  }
  size_t group_size = per_layer.size();
  for (const auto& l : kind_layers) group_size = std::min(group_size, l.size());
  out.layers_per_block = int32_t(group_size);
  for (size_t k = 0; k < kinds.size(); ++k) {
    for (size_t first = 0; first < kind_layers[k].size(); first += group_size) {
      const size_t n = std::min(group_size, kind_layers[k].size() - first);
      KVCacheSpec g = kinds[k];
      g.num_layers = int32_t(n);
      const int32_t group = int32_t(out.groups.size());
      out.groups.push_back(g);
      out.group_layers.emplace_back(kind_layers[k].begin() + first,
                                    kind_layers[k].begin() + first + n);
      for (size_t i = 0; i < n; ++i)
        out.layers[size_t(kind_layers[k][first + i])] = LayerPlace{group, int32_t(i)};
    }
  }
  return out;
}

KVCacheLayout uniform_kv_cache_layout(const KVCacheSpec& layer, int32_t num_layers) {
  KVCacheLayout out;
  KVCacheSpec g = layer;
  g.num_layers = num_layers;
  out.groups = {g};
  out.group_layers.resize(1);
  for (int32_t i = 0; i < num_layers; ++i) {
    out.group_layers[0].push_back(i);
    out.layers.push_back(LayerPlace{0, i});
  }
  out.layers_per_block = num_layers;
  return out;
}

int64_t num_blocks_for_budget(const KVCacheLayout& layout, int64_t budget_bytes) {
  const int64_t per_block = layout.bytes_per_block();
  return per_block > 0 && budget_bytes > 0 ? budget_bytes / per_block : 0;
}

}  // namespace kestrel
