#include "model/layers/dsv4_attention.h"

#include <cmath>
#include <vector>

namespace kestrel {
namespace {

class Dsv4Attention final : public AttentionLayer {
 public:
  Status load(const LoadContext& lc, const std::string& p) {
    const ModelConfig& c = lc.cfg;
    if (lc.tp != nullptr)
      return make_error("DeepSeek-V4 attention under tensor parallelism is not built yet");
    H_ = c.hidden_size;
    nh_ = int(c.num_attention_heads);
    hd_ = int(c.head_dim);
    rd_ = int(c.rope_dim);
    qr_ = c.dsv4.q_lora_rank;
    groups_ = int(c.dsv4.o_groups);
    orank_ = c.dsv4.o_lora_rank;
    const int64_t qd = int64_t(nh_) * hd_, per_group = qd / groups_;
    KASSIGN(q_a_, load_linear(lc.src, p + "q_a_proj", qr_, H_, c, lc.store));
    KASSIGN(q_a_norm_, load_norm_with_bias(lc.src, p + "q_a_norm", qr_, c));
    KASSIGN(q_b_, load_linear(lc.src, p + "q_b_proj", qd, qr_, c, lc.store));
    KASSIGN(kv_, load_linear(lc.src, p + "kv_proj", hd_, H_, c, lc.store));
    KASSIGN(kv_norm_, load_norm_with_bias(lc.src, p + "kv_norm", hd_, c));
    KASSIGN(const LinearWeight o_a,
            load_linear(lc.src, p + "o_a_proj", groups_ * orank_, per_group, c, lc.store));
    KASSIGN(o_b_, load_linear(lc.src, p + "o_b_proj", H_, groups_ * orank_, c, lc.store));
    KASSIGN(sinks_, load_vector(lc.src, p + "sinks", nh_));
    // Each group's rows of o_a: [o_lora_rank, heads of the group · head_dim].
    for (int g = 0; g < groups_; ++g) {
      LinearWeight w;
      w.w = o_a.w;
      w.w.shape = Shape{orank_, per_group};
      w.w.data = static_cast<const uint8_t*>(o_a.w.data) +
                 dtype_bytes(o_a.w.dtype, int64_t(g) * orank_ * per_group);
      KCHECK(o_a.scales.block == nullptr, "block-scaled o_a weights are not split by group yet");
      o_a_.push_back(w);
    }
    ones_.assign(size_t(hd_), 1.0f);
    for (const auto& [t, name] : {std::pair{&q_a_, "q_a_proj"},
                                  {&q_b_, "q_b_proj"},
                                  {&kv_, "kv_proj"},
                                  {&o_b_, "o_b_proj"}})
      lc.be.prepare_weight(*t, lc.act, p + name);
    for (int g = 0; g < groups_; ++g)
      lc.be.prepare_weight(o_a_[size_t(g)], lc.act, p + "o_a_proj[" + std::to_string(g) + "]");
    scale_ = float(1.0 / std::sqrt(double(hd_)));
    return Status::Ok();
  }

  void forward(const LayerContext& ctx, int layer, const float* h, float* out) override {
    const int64_t T = ctx.num_tokens, qd = int64_t(nh_) * hd_;
    Backend& be = ctx.be;
    Scratch& s = ctx.scratch;
    float* qa = s.get(kSlotMlaQa, T * qr_);
    be.linear(q_a_, h, T, qa);
    ctx.round(qa, T * qr_);
    ctx.rms_norm(qa, q_a_norm_, T, qr_, qa);
    float* q = s.get(kSlotAttnQ, T * qd);
    be.linear(q_b_, qa, T, q);
    ctx.round(q, T * qd);
    // Each head normed by its own RMS, without a weight.
    ctx.rms_norm(q, ones_.data(), T * nh_, hd_, q);
    float* kv = s.get(kSlotAttnK, T * hd_);
    be.linear(kv_, h, T, kv);
    ctx.round(kv, T * hd_);
    ctx.rms_norm(kv, kv_norm_, T, hd_, kv);
    rotate_tail(ctx, q, T, nh_, ctx.positions);
    rotate_tail(ctx, kv, T, 1, ctx.positions);

    KVLayer cache = ctx.kv.layer(layer);
    AttentionBatch batch = ctx.attention(layer);
    be.write_kv(cache, kv, kv, batch);  // one row is both key and value
    batch.sinks = sinks_.data();
    float* o = s.get(kSlotAttnOut, T * qd);
    be.paged_attention(q, cache, batch, nh_, scale_, o, ctx.act);
    // The values carried their keys' rotation: turning the output back by the query's angle
    // leaves each key's share depending on the distance alone.
    negated_.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) negated_[size_t(t)] = -ctx.positions[t];
    rotate_tail(ctx, o, T, nh_, negated_.data());

    // The grouped output projection: each group's heads through its rows of o_a, then o_b.
    const int64_t per_group = qd / groups_;
    float* in = s.get(kSlotMlaHeadIn, T * per_group);
    float* grouped = s.get(kSlotMlaOLat, T * groups_ * orank_);
    float* part = s.get(kSlotMlaHeadOut, T * orank_);
    for (int g = 0; g < groups_; ++g) {
      const RowCopy pick{.src = o + g * per_group,
                         .dst = in,
                         .rows = T,
                         .width = per_group,
                         .src_row = qd,
                         .dst_row = per_group};
      be.copy_rows({&pick, 1});
      be.linear(o_a_[size_t(g)], in, T, part);
      const RowCopy put{.src = part,
                        .dst = grouped + g * orank_,
                        .rows = T,
                        .width = orank_,
                        .src_row = orank_,
                        .dst_row = groups_ * orank_};
      be.copy_rows({&put, 1});
    }
    ctx.round(grouped, T * groups_ * orank_);
    be.linear(o_b_, grouped, T, out);
    ctx.round(out, T * H_);
  }

  size_t weight_bytes() const override {
    size_t b = q_a_.nbytes() + q_b_.nbytes() + kv_.nbytes() + o_b_.nbytes();
    for (const LinearWeight& w : o_a_) b += w.nbytes();
    return b;
  }

 private:
  // RoPE on the last rd_ values of each of `heads` heads per token, at `positions`: the slices
  // gathered, rotated (interleaved pairs) and put back.
  void rotate_tail(const LayerContext& ctx, float* x, int64_t T, int heads,
                   const int32_t* positions) {
    if (rd_ == 0) return;
    float* tail = ctx.scratch.get(kSlotMlaQRope, T * heads * rd_);
    const RowCopy out{.src = x + (hd_ - rd_),
                      .dst = tail,
                      .rows = T * heads,
                      .width = rd_,
                      .src_row = hd_,
                      .dst_row = rd_};
    ctx.be.copy_rows({&out, 1});
    ctx.be.rope(tail, T, heads, rd_, positions, ctx.rope);
    const RowCopy back{.src = tail,
                       .dst = x + (hd_ - rd_),
                       .rows = T * heads,
                       .width = rd_,
                       .src_row = rd_,
                       .dst_row = hd_};
    ctx.be.copy_rows({&back, 1});
  }

  int64_t H_ = 0, qr_ = 0, orank_ = 0;
  int nh_ = 0, hd_ = 0, rd_ = 0, groups_ = 0;
  float scale_ = 1.0f;
  LinearWeight q_a_, q_b_, kv_, o_b_;
  std::vector<LinearWeight> o_a_;  // per group: views into o_a_proj's rows
  Norm q_a_norm_, kv_norm_;
  std::vector<float> sinks_, ones_;
  std::vector<int32_t> negated_;  // the inverse rotation's positions
};

}  // namespace

Expected<std::unique_ptr<AttentionLayer>> load_dsv4_attention(const LoadContext& lc,
                                                              const std::string& prefix) {
  auto a = std::make_unique<Dsv4Attention>();
  KTRY(a->load(lc, prefix));
  return std::unique_ptr<AttentionLayer>(std::move(a));
}

}  // namespace kestrel
