// DeepSeek's multi-head latent attention (models.md §4.2–4.5). The cache keeps, per token, the
// normalized latent c (kv_lora_rank) and the roped shared key kpe (qk_rope_head_dim); attention
// runs in the absorbed form for every token: W_UK is folded into the query (q̃_h =
// W_UK[h]ᵀ·q_nope_h) and W_UV applied to the attention-weighted latent (o_h = W_UV[h]·ō_h), so keys
// and values are never expanded per head.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/layers/lightning_indexer.h"
#include "model/layers/mla_attention.h"

namespace kestrel {
namespace {

double yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

class MlaAttention final : public AttentionLayer {
 public:
  Status load(const LoadContext& lc, const std::string& p) {
    const ModelConfig& c = lc.cfg;
    const MlaConfig& m = c.mla;
    H_ = c.hidden_size;
    // A tensor-parallel rank: its heads' rows of q_b and of kv_b, its hidden rows of o (over
    // every head: the heads' outputs are gathered); the latent path (q_a, kv_a) and the cache are
    // whole on every rank.
    const IndexRange heads = lc.tp ? lc.tp->q_heads : IndexRange{0, c.num_attention_heads};
    nh_ = int(heads.size());
    const int64_t all_heads = c.num_attention_heads;
    qr_ = m.q_lora_rank;
    r_ = m.kv_lora_rank;
    dn_ = m.qk_nope_head_dim;
    dr_ = m.qk_rope_head_dim;
    dv_ = m.v_head_dim;
    const int64_t qk = dn_ + dr_;
    if (qr_ > 0) {
      KASSIGN(q_a_, load_linear(lc.src, p + "q_a_proj", qr_, H_, c, lc.store));
      KASSIGN(q_a_norm_, load_vector(lc.src, p + "q_a_layernorm.weight", qr_));
      KASSIGN(q_b_, load_linear(lc.src, p + "q_b_proj", all_heads * qk, qr_, c, lc.store,
                                {heads.begin * qk, heads.end * qk}));
    } else {
      KASSIGN(q_b_, load_linear(lc.src, p + "q_proj", all_heads * qk, H_, c, lc.store,
                                {heads.begin * qk, heads.end * qk}));
    }
    KASSIGN(kv_a_, load_linear(lc.src, p + "kv_a_proj_with_mqa", r_ + dr_, H_, c, lc.store));
    KASSIGN(kv_a_norm_, load_vector(lc.src, p + "kv_a_layernorm.weight", r_));
    const int64_t kv_b_rows = all_heads * (dn_ + dv_);
    KASSIGN(const LinearWeight kv_b,
            load_linear(lc.src, p + "kv_b_proj", kv_b_rows, r_, c, lc.store));
    const IndexRange o_rows = lc.tp ? lc.tp->hidden : IndexRange{};
    KASSIGN(o_, load_linear(lc.src, p + "o_proj", H_, all_heads * dv_, c, lc.store, o_rows));
    split_kv_b(kv_b, heads, lc.store);
    KASSIGN(kv_scales_, KvLayerScales::load_latent(lc.src, lc.kv, p));
    if (c.indexer.enabled()) {
      KASSIGN(indexer_, LightningIndexer::load(lc, p + "indexer."));
    }
    for (const auto& [t, name] : {std::pair{&q_a_, "q_a_proj"},
                                  {&q_b_, q_a_.defined() ? "q_b_proj" : "q_proj"},
                                  {&kv_a_, "kv_a_proj_with_mqa"},
                                  {&o_, "o_proj"}})
      if (t->defined()) lc.be.prepare_weight(*t, lc.act, p + name);
    // The per-head products too: planned, they run the float panels' GEMM (one fma chain per
    // output, as the row kernels compute it, but without transposing the rows on every call).
    for (size_t hh = 0; hh < uk_t_.size(); ++hh) {
      lc.be.prepare_weight(uk_t_[hh], lc.act, p + "kv_b_proj W_UK[" + std::to_string(hh) + "]");
      lc.be.prepare_weight(uv_[hh], lc.act, p + "kv_b_proj W_UV[" + std::to_string(hh) + "]");
    }

    // Softmax scale of the (dn + dr)-wide heads, times mscale² under YaRN (as transformers).
    scale_ = float(1.0 / std::sqrt(double(qk)));
    const RopeScaling& rs = c.rope_scaling;
    if (rs.type != RopeScalingType::kNone && rs.mscale_all_dim != 0.0) {
      const double ms = yarn_mscale(rs.factor, rs.mscale_all_dim);
      scale_ = float(scale_ * ms * ms);
    }
    return Status::Ok();
  }

  void forward(const LayerContext& ctx, int layer, const float* h, float* out) override {
    const int64_t T = ctx.num_tokens, qk = dn_ + dr_;
    Backend& be = ctx.be;
    Scratch& s = ctx.scratch;
    // Queries [T, nh, dn + dr].
    float* q = s.get(kSlotAttnQ, T * nh_ * qk);
    float* qa = nullptr;
    if (qr_ > 0) {
      qa = s.get(kSlotMlaQa, T * qr_);
      be.linear(q_a_, h, T, qa);
      ctx.round(qa, T * qr_);
      be.rms_norm(qa, q_a_norm_.data(), ctx.eps, T, qr_, qa, ctx.act);
      be.linear(q_b_, qa, T, q);
    } else {
      be.linear(q_b_, h, T, q);
    }
    ctx.round(q, T * nh_ * qk);
    // The compressed KV: [latent r | shared rope key dr] per token.
    float* kva = s.get(kSlotMlaKvA, T * (r_ + dr_));
    be.linear(kv_a_, h, T, kva);
    ctx.round(kva, T * (r_ + dr_));
    float* latent = s.get(kSlotMlaLatent, T * r_);
    float* k_rope = s.get(kSlotMlaKRope, T * dr_);
    float* q_rope = s.get(kSlotMlaQRope, T * nh_ * dr_);
    const RowCopy parts[3] = {
        {.src = kva, .dst = latent, .rows = T, .width = r_, .src_row = r_ + dr_, .dst_row = r_},
        {.src = kva + r_,
         .dst = k_rope,
         .rows = T,
         .width = dr_,
         .src_row = r_ + dr_,
         .dst_row = dr_},
        {.src = q + dn_,
         .dst = q_rope,
         .rows = T * nh_,
         .width = dr_,
         .src_row = qk,
         .dst_row = dr_}};
    be.copy_rows(parts);
    be.rms_norm(latent, kv_a_norm_.data(), ctx.eps, T, r_, latent, ctx.act);
    be.rope(q_rope, T, nh_, int(dr_), ctx.positions, ctx.rope);
    be.rope(k_rope, T, 1, int(dr_), ctx.positions, ctx.rope);
    kv_scales_.calibrate_latent(ctx.be, latent, T * r_, k_rope, T * dr_);
    MlaCacheLayer cache = ctx.kv.mla_layer(layer, int(r_), int(dr_));
    kv_scales_.apply(cache);
    AttentionBatch batch = ctx.attention(layer);
    be.write_mla_cache(cache, latent, k_rope, batch);
    if (indexer_) {
      // DeepSeek-V3.2: each query reads only the keys its indexer picks.
      batch.selected_keys = indexer_->select(ctx, batch, h, qa, cache);
      batch.keys_per_token = indexer_->top_k();
    }

    // q̃_h = W_UK[h]ᵀ · q_nope_h, head by head.
    float* q_lat = s.get(kSlotMlaQLat, T * nh_ * r_);
    float* head_in = s.get(kSlotMlaHeadIn, T * std::max(dn_, r_));
    float* head_out = s.get(kSlotMlaHeadOut, T * std::max(dv_, r_));
    for (int hh = 0; hh < nh_; ++hh) {
      const RowCopy in{.src = q + hh * qk,
                       .dst = head_in,
                       .rows = T,
                       .width = dn_,
                       .src_row = nh_ * qk,
                       .dst_row = dn_};
      be.copy_rows({&in, 1});
      be.linear(uk_t_[hh], head_in, T, head_out);
      const RowCopy out{.src = head_out,
                        .dst = q_lat + hh * r_,
                        .rows = T,
                        .width = r_,
                        .src_row = r_,
                        .dst_row = nh_ * r_};
      be.copy_rows({&out, 1});
    }
    float* o_lat = s.get(kSlotMlaOLat, T * nh_ * r_);
    be.mla_attention(q_lat, q_rope, cache, batch, nh_, scale_, o_lat, ctx.act);

    // o_h = W_UV[h] · ō_h into [T, nh, dv].
    float* o = s.get(kSlotAttnOut, T * nh_ * dv_);
    for (int hh = 0; hh < nh_; ++hh) {
      const RowCopy in{.src = o_lat + hh * r_,
                       .dst = head_in,
                       .rows = T,
                       .width = r_,
                       .src_row = nh_ * r_,
                       .dst_row = r_};
      be.copy_rows({&in, 1});
      be.linear(uv_[hh], head_in, T, head_out);
      const RowCopy out{.src = head_out,
                        .dst = o + hh * dv_,
                        .rows = T,
                        .width = dv_,
                        .src_row = dv_,
                        .dst_row = nh_ * dv_};
      be.copy_rows({&out, 1});
    }
    ctx.round(o, T * nh_ * dv_);
    output_projection(ctx, o_, TpSplit::kAttention, o, T, out);
  }

  size_t weight_bytes() const override {
    size_t b = q_a_.nbytes() + q_b_.nbytes() + kv_a_.nbytes() + o_.nbytes();
    for (const auto& t : uk_t_) b += t.nbytes();
    for (const auto& t : uv_) b += t.nbytes();
    if (indexer_) b += indexer_->weight_bytes();
    return b;
  }

 private:
  // kv_b_proj is [nh · (dn + dv), r], head-major, each head [dn rows of W_UK | dv rows of W_UV].
  // Kept as f32 (exact for bf16 and dequantized FP8 alike): W_UK[h] transposed to [r, dn] so the
  // fold is a plain x·Wᵀ, and W_UV[h] as its [dv, r] rows; only the heads in `heads`.
  void split_kv_b(const LinearWeight& kv_b, IndexRange heads, WeightStore& store) {
    const std::vector<float> w = dequantize_matrix(kv_b);
    for (int64_t hh = heads.begin; hh < heads.end; ++hh) {
      const float* head = w.data() + size_t(hh) * (dn_ + dv_) * r_;
      std::vector<float>& uk = store.f32.emplace_back(size_t(r_ * dn_));
      for (int64_t i = 0; i < dn_; ++i)
        for (int64_t j = 0; j < r_; ++j) uk[j * dn_ + i] = head[i * r_ + j];
      uk_t_.emplace_back(Tensor{uk.data(), DType::F32, Shape{r_, dn_}});
      std::vector<float>& uv = store.f32.emplace_back(head + dn_ * r_, head + (dn_ + dv_) * r_);
      uv_.emplace_back(Tensor{uv.data(), DType::F32, Shape{dv_, r_}});
    }
  }

  int64_t H_ = 0, qr_ = 0, r_ = 0, dn_ = 0, dr_ = 0, dv_ = 0;
  int nh_ = 0;
  float scale_ = 1.0f;
  LinearWeight q_a_, q_b_, kv_a_, o_;
  std::vector<float> q_a_norm_, kv_a_norm_;
  std::vector<LinearWeight> uk_t_, uv_;
  KvLayerScales kv_scales_;
  std::unique_ptr<LightningIndexer> indexer_;  // DeepSeek-V3.2; null in V3
};

}  // namespace

Expected<std::unique_ptr<AttentionLayer>> load_mla_attention(const LoadContext& lc,
                                                             const std::string& prefix) {
  auto a = std::make_unique<MlaAttention>();
  KTRY(a->load(lc, prefix));
  return std::unique_ptr<AttentionLayer>(std::move(a));
}

}  // namespace kestrel
