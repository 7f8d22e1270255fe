// model/layers/lightning_indexer.h — DeepSeek-V3.2's lightning indexer (DeepSeek Sparse
// Attention), part of each MLA layer: from the layer's normed input h and its query latent it
// scores every earlier token and picks the top index_topk that the layer's attention may read.
//   q_I = wq_b(q_latent) as [heads, dim], RoPE (half-split) on its first rope dims
//   k_I = LayerNorm_1e-6(wk(h)), RoPE likewise; one key per token, kept in the latent cache rows
//   w   = weights_proj(h) · heads^-0.5, the product in f32
// and Backend::indexer_top_k picks with I(t, j) = Σ_h w_h · relu(dim^-0.5 · q_I[t, h] · k_I[j]).
// The indexer is whole on every tensor-parallel rank, so every rank picks the same keys. Owned
// by its attention layer; used by the thread running the forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/layers/layer.h"

namespace kestrel {

class LightningIndexer {
 public:
  // Tensors under `prefix` (…self_attn.indexer.): wq_b, wk, k_norm.{weight, bias}, weights_proj.
  static Expected<std::unique_ptr<LightningIndexer>> load(const LoadContext& lc,
                                                          const std::string& prefix);
  // Stores the batch's keys in `cache` (their rows' indexer part) and returns each token's
  // selected key positions, [T, top_k()] (valid until the next call).
  const int32_t* select(const LayerContext& ctx, const AttentionBatch& batch, const float* h,
                        const float* q_latent, const MlaCacheLayer& cache);
  int top_k() const { return int(top_k_); }
  size_t weight_bytes() const;

 private:
  int64_t hidden_ = 0, q_rank_ = 0, heads_ = 0, dim_ = 0, top_k_ = 0;
  LinearWeight wq_b_, wk_, weights_proj_;
  bool weights_in_f32_ = false;  // weights_proj stored in f32: its output is not rounded
  std::vector<float> k_norm_w_, k_norm_b_;
  std::vector<int32_t> selected_;
};

}  // namespace kestrel
