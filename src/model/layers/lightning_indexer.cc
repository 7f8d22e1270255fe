#include "model/layers/lightning_indexer.h"

#include <cmath>

namespace kestrel {

Expected<std::unique_ptr<LightningIndexer>> LightningIndexer::load(const LoadContext& lc,
                                                                   const std::string& p) {
  const ModelConfig& c = lc.cfg;
  auto x = std::make_unique<LightningIndexer>();
  x->hidden_ = c.hidden_size;
  x->q_rank_ = c.mla.q_lora_rank;
  x->heads_ = c.indexer.num_heads;
  x->dim_ = c.indexer.head_dim;
  x->top_k_ = c.indexer.top_k;
  KASSIGN(x->wq_b_, load_linear(lc.src, p + "wq_b", x->heads_ * x->dim_, x->q_rank_, c, lc.store));
  KASSIGN(x->wk_, load_linear(lc.src, p + "wk", x->dim_, x->hidden_, c, lc.store));
  KASSIGN(x->weights_proj_,
          load_linear(lc.src, p + "weights_proj", x->heads_, x->hidden_, c, lc.store));
  KASSIGN(x->k_norm_w_, load_vector(lc.src, p + "k_norm.weight", x->dim_));
  KASSIGN(x->k_norm_b_, load_vector(lc.src, p + "k_norm.bias", x->dim_));
  x->weights_in_f32_ = x->weights_proj_.w.dtype == DType::F32;
  for (const auto& [t, name] :
       {std::pair{&x->wq_b_, "wq_b"}, {&x->wk_, "wk"}, {&x->weights_proj_, "weights_proj"}})
    lc.be.prepare_weight(*t, lc.act, p + name);
  return x;
}

const int32_t* LightningIndexer::select(const LayerContext& ctx, const AttentionBatch& batch,
                                        const float* h, const float* q_latent,
                                        const MlaCacheLayer& cache) {
  const int64_t T = ctx.num_tokens;
  Backend& be = ctx.be;
  float* q = ctx.scratch.get(kSlotIndexQ, T * heads_ * dim_);
  float* k = ctx.scratch.get(kSlotIndexK, T * dim_);
  float* w = ctx.scratch.get(kSlotIndexW, T * heads_);
  be.linear(wq_b_, q_latent, T, q);
  ctx.round(q, T * heads_ * dim_);
  be.linear(wk_, h, T, k);
  ctx.round(k, T * dim_);
  be.layer_norm(k, k_norm_w_.data(), k_norm_b_.data(), 1e-6f, T, dim_, k, ctx.act);
  // The MLA's rotary table, but pairing dimension i with i + rope/2 (rotate_half), on the
  // first rope dims of each head.
  RopeParams rope = ctx.rope;
  rope.interleaved = false;
  be.rope(q, T, int(heads_), int(dim_), ctx.positions, rope);
  be.rope(k, T, 1, int(dim_), ctx.positions, rope);
  be.write_indexer_keys(cache, k, batch);
  // weights_proj runs in its weight's dtype (transformers keeps an f32 one in f32), then
  // × heads^-0.5 in f32.
  be.linear(weights_proj_, h, T, w);
  if (!weights_in_f32_) ctx.round(w, T * heads_);
  be.scale(w, T * heads_, float(1.0 / std::sqrt(double(heads_))), DType::F32);
  selected_.resize(size_t(T * top_k_));
  be.indexer_top_k(q, w, cache, batch, int(heads_), float(1.0 / std::sqrt(double(dim_))),
                   int(top_k_), selected_.data());
  return selected_.data();
}

size_t LightningIndexer::weight_bytes() const {
  return wq_b_.nbytes() + wk_.nbytes() + weights_proj_.nbytes();
}

}  // namespace kestrel
