// Grouped-query attention over the paged KV cache (Llama, Qwen2, Qwen3 and Qwen3-MoE blocks), and
// the gated attention of Qwen3-Next / Qwen3.5 (q_proj holds [query | gate] per head).
#include <cmath>

#include "model/layers/gqa_attention.h"

namespace kestrel {
namespace {

class GqaAttention final : public AttentionLayer {
 public:
  Status load(const LoadContext& lc, const std::string& p) {
    const ModelConfig& c = lc.cfg;
    H_ = c.hidden_size;
    hd_ = int(c.head_dim);
    qk_norm_ = c.qk_norm;
    gate_ = c.attn_output_gate;
    scale_ = c.query_pre_attn_scalar > 0 ? float(1.0 / std::sqrt(c.query_pre_attn_scalar))
                                         : 1.0f / std::sqrt(float(hd_));
    const int64_t qd = c.num_attention_heads * hd_, kvd = c.num_key_value_heads * hd_;
    const int64_t per_head = gate_ ? 2 * hd_ : hd_;  // q_proj rows per head
    // A tensor-parallel rank: its query heads' rows of q, the rows of the KV heads they read,
    // and its hidden features' rows of o (over every head: the heads' outputs are gathered).
    const IndexRange heads = lc.tp ? lc.tp->q_heads : IndexRange{0, c.num_attention_heads};
    const IndexRange kv = lc.tp ? lc.tp->kv_heads : IndexRange{0, c.num_key_value_heads};
    nh_ = int(heads.size());
    nkv_ = int(kv.size());
    const IndexRange q_rows{heads.begin * per_head, heads.end * per_head};
    const IndexRange kv_rows{kv.begin * hd_, kv.end * hd_};
    KASSIGN(q_, load_linear(lc.src, p + "q_proj", c.num_attention_heads * per_head, H_, c, lc.store,
                            q_rows));
    KASSIGN(k_, load_linear(lc.src, p + "k_proj", kvd, H_, c, lc.store, kv_rows));
    KASSIGN(v_, load_linear(lc.src, p + "v_proj", kvd, H_, c, lc.store, kv_rows));
    const IndexRange o_rows = lc.tp ? lc.tp->hidden : IndexRange{};
    KASSIGN(o_, load_linear(lc.src, p + "o_proj", H_, qd, c, lc.store, o_rows));
    // q/k/v biases (Qwen2's attention_bias, or a quantizer's smoothing) come with the linears
    // (LinearWeight::bias); a config that declares them needs them.
    if (c.attention_bias)
      for (const auto& [t, name] : {std::pair{&q_, "q_proj"}, {&k_, "k_proj"}, {&v_, "v_proj"}})
        if (t->bias == nullptr && !lc.src.has(p + name + ".bias"))
          return make_error("{}{}.bias: missing (the config sets attention_bias)", p, name);
    if (qk_norm_) {
      KASSIGN(q_norm_, load_norm_with_bias(lc.src, p + "q_norm", hd_, c));
      KASSIGN(k_norm_, load_norm_with_bias(lc.src, p + "k_norm", hd_, c));
    }
    for (const auto& [t, name] :
         {std::pair{&q_, "q_proj"}, {&k_, "k_proj"}, {&v_, "v_proj"}, {&o_, "o_proj"}})
      lc.be.prepare_weight(*t, lc.act, p + name);
    KASSIGN(kv_scales_, KvLayerScales::load(lc.src, lc.kv, p, kv, c.num_key_value_heads, hd_));
    return Status::Ok();
  }

  void forward(const LayerContext& ctx, int layer, const float* h, float* out) override {
    const int64_t T = ctx.num_tokens;
    const int64_t qd = int64_t(nh_) * hd_, kvd = int64_t(nkv_) * hd_;  // this rank's
    Backend& be = ctx.be;
    float* q = ctx.scratch.get(kSlotAttnQ, T * qd);
    float* k = ctx.scratch.get(kSlotAttnK, T * kvd);
    float* v = ctx.scratch.get(kSlotAttnV, T * kvd);
    // With the output gate q_proj gives [q | gate] per head, split into q and a buffer of its own
    // (the attention output's, free until then).
    float* qg = gate_ ? ctx.scratch.get(kSlotAttnOut, T * 2 * qd) : q;
    const LinearJob qkv[3] = {{&q_, qg}, {&k_, k}, {&v_, v}};
    be.linear_group(qkv, h, T);
    float* gate = nullptr;
    if (gate_) {
      gate = ctx.scratch.get(kSlotAttnGate, T * qd);
      const int64_t rows = T * nh_;
      const RowCopy halves[2] = {
          {.src = qg, .dst = q, .rows = rows, .width = hd_, .src_row = 2 * hd_, .dst_row = hd_},
          {.src = qg + hd_,
           .dst = gate,
           .rows = rows,
           .width = hd_,
           .src_row = 2 * hd_,
           .dst_row = hd_}};
      be.copy_rows(halves);
    }
    ctx.round(q, T * qd);
    ctx.round(k, T * kvd);
    ctx.round(v, T * kvd);
    if (qk_norm_) {
      ctx.rms_norm(q, q_norm_, T * nh_, hd_, q);
      ctx.rms_norm(k, k_norm_, T * nkv_, hd_, k);
    }
    // Gemma3's sliding-window layers rotate with their own base.
    const RopeParams& rope = ctx.rope_local != nullptr && ctx.attention(layer).sliding_window > 0
                                 ? *ctx.rope_local
                                 : ctx.rope;
    be.rope(q, T, nh_, hd_, ctx.positions, rope);
    // Before RoPE: rotation moves a pair's magnitude between its two values, within the headroom
    // calibration leaves.
    kv_scales_.calibrate(be, k, v, T, kvd);
    KVLayer cache = ctx.kv.layer(layer);
    kv_scales_.apply(cache);
    be.write_kv(cache, k, v, ctx.attention(layer), &rope);  // K rotated on its way into the cache
    float* attn = ctx.scratch.get(kSlotAttnOut, T * qd);
    be.paged_attention(q, cache, ctx.attention(layer), nh_, scale_, attn, ctx.act);
    // attn · sigmoid(gate), the gate, its sigmoid and the product each rounded as the
    // reference's are.
    if (gate_) be.sigmoid_mul(attn, gate, T, qd, qd, ctx.act);
    output_projection(ctx, o_, TpSplit::kAttention, attn, T, out);
  }

  size_t weight_bytes() const override {
    return q_.nbytes() + k_.nbytes() + v_.nbytes() + o_.nbytes();
  }

 private:
  int64_t H_ = 0;
  int nh_ = 0, nkv_ = 0, hd_ = 0;
  bool qk_norm_ = false, gate_ = false;
  float scale_ = 1.0f;  // of the attention scores
  LinearWeight q_, k_, v_, o_;
  Norm q_norm_, k_norm_;
  KvLayerScales kv_scales_;
};

}  // namespace

Expected<std::unique_ptr<AttentionLayer>> load_gqa_attention(const LoadContext& lc,
                                                             const std::string& prefix) {
  auto a = std::make_unique<GqaAttention>();
  KTRY(a->load(lc, prefix));
  return std::unique_ptr<AttentionLayer>(std::move(a));
}

}  // namespace kestrel
