#include "model/kv_layout.h"

#include <vector>

namespace kestrel {

KVCacheSpec layer_kv_cache_spec(const ModelConfig& c, DType dtype, int block_size, int64_t layer) {
  KVCacheSpec s;
  s.block_size = block_size;
  if (c.is_linear_layer(layer)) {
    s.kind = KVCacheKind::kLinearAttentionState;
    s.state_floats = c.linear.state_floats();
    return s;
  }
  if (c.mla.enabled()) {
    s.kind = KVCacheKind::kMlaLatent;
    s.num_kv_heads = 1;
    s.head_dim = int32_t(c.latent_cache_width());
    s.row_bytes = int32_t(dtype_bytes(dtype, s.head_dim));
    return s;
  }
  s.num_kv_heads = int32_t(c.num_key_value_heads);
  s.head_dim = int32_t(c.head_dim);
  s.row_bytes = int32_t(dtype_bytes(dtype, s.head_dim));
  if (const int32_t w = c.sliding_window(layer); w > 0) {
    s.kind = KVCacheKind::kSlidingWindow;
    s.sliding_window = w;
  }
  return s;
}

KVCacheLayout model_kv_cache_layout(const ModelConfig& c, DType dtype, int block_size) {
  std::vector<KVCacheSpec> specs;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    specs.push_back(layer_kv_cache_spec(c, dtype, block_size, l));
  auto layout = plan_kv_cache_layout(specs);
  KCHECK(layout.ok(), "{}", layout.error().message);
  return *std::move(layout);
}

}  // namespace kestrel
