// Gated DeltaNet, the linear-attention layer of Qwen3-Next and Qwen3.5 (models.md 5.3): a short
// causal depthwise convolution over [q | k | v], then per value head a delta-rule recurrence over
// a [key_head_dim, value_head_dim] state with a per-token decay, a gated RMSNorm and out_proj.
// Each sequence's conv inputs and recurrent matrices live in its state slot of the KV storage;
// a sequence starting at position 0 starts from zeros. The recurrence runs token by token for
// prefill and decode alike (transformers' chunked prefill form is an exact rewriting of it), so
// a sequence's result does not depend on how its tokens are split into steps or batched. A
// sequence verifying drafts also leaves the state after each of its tokens but the last in the
// slot's draft snapshots (ForwardBatch::state_snapshots), which the runner restores from when it
// rejects drafts: a recurrence cannot be run backwards. A PD producer's prompt leaves its state
// before its last token in a held slot (ForwardBatch::state_holds) for the decode instance.
// The convolution, the recurrence and the gated norm are backend ops (Backend::causal_conv1d,
// gated_delta_rule, gated_rms_norm); this layer holds the weights and lays out the projections.
#include <cmath>

#include "model/layers/gated_deltanet.h"
#include "tensor/quant_formats.h"

namespace kestrel {
namespace {

class GatedDeltaNet final : public AttentionLayer {
 public:
  // Under tensor parallelism the layer holds key heads lc.tp->linear_key_heads with their value
  // heads: those heads' rows of every input projection, conv channels, decays and state, and
  // its hidden rows of out_proj (the heads' outputs are gathered before it).
  Status load(const LoadContext& lc, const std::string& p) {
    const ModelConfig& c = lc.cfg;
    const LinearAttentionConfig& whole = c.linear;
    H_ = c.hidden_size;
    const IndexRange g = lc.tp ? lc.tp->linear_key_heads : IndexRange{0, whole.num_key_heads};
    const int64_t rho = whole.value_heads_per_key_head();
    l_ = whole;
    l_.num_key_heads = g.size();
    l_.num_value_heads = g.size() * rho;
    const int64_t dk = l_.key_head_dim, dv = l_.value_head_dim;
    const int64_t kd = whole.key_dim(), vd = whole.value_dim(), nv = whole.num_value_heads;
    // This rank's rows of a projection whose rows come `per` to a key head, from `first`.
    auto rows = [&](int64_t first, int64_t per) {
      return IndexRange{first + g.begin * per, first + g.end * per};
    };
    auto linear = [&](const std::string& name, int64_t total, IndexRange r) {
      return load_linear(lc.src, p + name, total, H_, c, lc.store, r);
    };
    if (l_.fused_projections) {
      // Grouped by key head: a rank's heads are one run of rows.
      KASSIGN(qkvz_, linear("in_proj_qkvz", 2 * kd + 2 * vd, rows(0, 2 * dk + 2 * rho * dv)));
      KASSIGN(ba_, linear("in_proj_ba", 2 * nv, rows(0, 2 * rho)));
      lc.be.prepare_weight(qkvz_, lc.act, p + "in_proj_qkvz");
      lc.be.prepare_weight(ba_, lc.act, p + "in_proj_ba");
    } else {
      // [q | k | v]: a rank's heads are a run of rows in each part.
      const int64_t cd = whole.conv_dim();
      KASSIGN(q_, linear("in_proj_qkv", cd, rows(0, dk)));
      KASSIGN(k_, linear("in_proj_qkv", cd, rows(kd, dk)));
      KASSIGN(v_, linear("in_proj_qkv", cd, rows(2 * kd, rho * dv)));
      KASSIGN(z_, linear("in_proj_z", vd, rows(0, rho * dv)));
      KASSIGN(b_, linear("in_proj_b", nv, rows(0, rho)));
      KASSIGN(a_, linear("in_proj_a", nv, rows(0, rho)));
      for (const auto& [t, name] : {std::pair{&q_, "in_proj_qkv (q)"},
                                    {&k_, "in_proj_qkv (k)"},
                                    {&v_, "in_proj_qkv (v)"},
                                    {&z_, "in_proj_z"},
                                    {&b_, "in_proj_b"},
                                    {&a_, "in_proj_a"}})
        lc.be.prepare_weight(*t, lc.act, p + name);
    }
    KASSIGN(out_, load_linear(lc.src, p + "out_proj", H_, vd, c, lc.store,
                              lc.tp ? lc.tp->hidden : IndexRange{}));
    lc.be.prepare_weight(out_, lc.act, p + "out_proj");
    const int64_t K = whole.conv_kernel;
    KASSIGN(const Tensor conv, lc.src.get(p + "conv1d.weight", Shape{whole.conv_dim(), 1, K}));
    std::vector<float> all(size_t(whole.conv_dim() * K));
    dequantize_row(conv.dtype, conv.data, all.data(), int64_t(all.size()));
    for (const IndexRange ch : {rows(0, dk), rows(kd, dk), rows(2 * kd, rho * dv)})
      conv_.insert(conv_.end(), all.begin() + ch.begin * K, all.begin() + ch.end * K);
    auto heads = [&](std::vector<float> v) {
      return std::vector<float>(v.begin() + g.begin * rho, v.begin() + g.end * rho);
    };
    KASSIGN(std::vector<float> dt_bias, load_vector(lc.src, p + "dt_bias", nv));
    KASSIGN(std::vector<float> a_log, load_vector(lc.src, p + "A_log", nv));
    dt_bias_ = heads(std::move(dt_bias));
    decay_rate_ = heads(std::move(a_log));
    for (float& v : decay_rate_) v = -std::exp(v);  // -exp(A_log), in f32 as the reference
    // The gated norm's weight is plain (not zero-centred).
    KASSIGN(norm_, load_vector(lc.src, p + "norm.weight", l_.value_head_dim));
    return Status::Ok();
  }

  void forward(const LayerContext& ctx, int layer, const float* h, float* out) override {
    const int64_t T = ctx.num_tokens;
    const int64_t cd = l_.conv_dim(), kd = l_.key_dim(), vd = l_.value_dim();
    const int64_t nv = l_.num_value_heads;
    KCHECK(ctx.recurrent.state_slots != nullptr,
           "a linear-attention layer run without state slots");
    float* x = ctx.scratch.get(kSlotLinearQkv, T * cd);
    float* z = ctx.scratch.get(kSlotLinearZ, T * vd);
    float* b = ctx.scratch.get(kSlotLinearB, T * nv);
    float* a = ctx.scratch.get(kSlotLinearA, T * nv);
    project(ctx, h, x, z, b, a);
    // A slot holds the conv inputs, then the recurrent matrices.
    StateSlots states = ctx.kv.state_slots(layer);
    float* y = ctx.scratch.get(kSlotLinearConv, T * cd);
    const CausalConv1d conv{.x = x,
                            .weight = conv_.data(),
                            .channels = cd,
                            .kernel = int(l_.conv_kernel),
                            .y = y,
                            .states = states,
                            .act = ctx.act};
    ctx.be.causal_conv1d(conv, ctx.recurrent);
    float* core = ctx.scratch.get(kSlotLinearOut, T * vd);
    states.base += l_.conv_state_floats();
    const GatedDeltaRule rule{.q = y,
                              .k = y + kd,
                              .v = y + 2 * kd,
                              .stride = cd,
                              .b = b,
                              .a = a,
                              .dt_bias = dt_bias_.data(),
                              .decay_rate = decay_rate_.data(),
                              .key_heads = int(l_.num_key_heads),
                              .value_heads = int(nv),
                              .key_dim = l_.key_head_dim,
                              .value_dim = l_.value_head_dim,
                              .out = core,
                              .states = states,
                              .act = ctx.act};
    ctx.be.gated_delta_rule(rule, ctx.recurrent);
    ctx.be.gated_rms_norm(core, z, norm_.data(), ctx.eps, T * nv, l_.value_head_dim, ctx.act);
    output_projection(ctx, out_, TpSplit::kLinearValue, core, T, out);
  }

  size_t weight_bytes() const override {
    size_t n = out_.nbytes();
    for (const LinearWeight* t : {&qkvz_, &ba_, &q_, &k_, &v_, &z_, &b_, &a_})
      if (t->defined()) n += t->nbytes();
    return n;
  }

 private:
  // x [T, conv_dim] = [q | k | v], z [T, value_dim], b and a [T, value heads], each rounded to the
  // activation dtype as the reference's projections are.
  void project(const LayerContext& ctx, const float* h, float* x, float* z, float* b,
               float* a) const {
    const int64_t T = ctx.num_tokens;
    const int64_t kd = l_.key_dim(), vd = l_.value_dim(), nv = l_.num_value_heads;
    const int64_t cd = l_.conv_dim();
    if (!l_.fused_projections) {
      // q, k and v into their own rows of scratch, then side by side into x.
      float* qkv = ctx.scratch.get(kSlotLinearConv, T * cd);
      float *q = qkv, *k = q + T * kd, *v = k + T * kd;
      const LinearJob jobs[6] = {{&q_, q}, {&k_, k}, {&v_, v}, {&z_, z}, {&b_, b}, {&a_, a}};
      ctx.be.linear_group(jobs, h, T);
      const RowCopy parts[3] = {
          {.src = q, .dst = x, .rows = T, .width = kd, .src_row = kd, .dst_row = cd},
          {.src = k, .dst = x + kd, .rows = T, .width = kd, .src_row = kd, .dst_row = cd},
          {.src = v, .dst = x + 2 * kd, .rows = T, .width = vd, .src_row = vd, .dst_row = cd}};
      ctx.be.copy_rows(parts);
      ctx.round(x, T * cd);
      ctx.round(z, T * vd);
      ctx.round(b, T * nv);
      ctx.round(a, T * nv);
      return;
    }
    // Qwen3-Next groups its outputs by key head g: [q_g | k_g | v of g's value heads | their z]
    // and [b of g's value heads | their a]; regroup them into the flat layout.
    const int64_t nk = l_.num_key_heads, dk = l_.key_head_dim, dv = l_.value_head_dim;
    const int64_t rho = nv / nk, wide = 2 * kd + 2 * vd, group = 2 * dk + 2 * rho * dv;
    float* qkvz = ctx.scratch.get(kSlotLinearConv, T * wide);
    float* ba = ctx.scratch.get(kSlotAttnGate, T * 2 * nv);
    const LinearJob jobs[2] = {{&qkvz_, qkvz}, {&ba_, ba}};
    ctx.be.linear_group(jobs, h, T);
    ctx.round(qkvz, T * wide);
    ctx.round(ba, T * 2 * nv);
    // Each part: per token, one block per key head.
    auto part = [&](const float* src, float* dst, int64_t width, int64_t src_row, int64_t src_group,
                    int64_t dst_row) {
      return RowCopy{.src = src,
                     .dst = dst,
                     .rows = T,
                     .width = width,
                     .blocks = nk,
                     .src_row = src_row,
                     .dst_row = dst_row,
                     .src_block = src_group,
                     .dst_block = width};
    };
    const RowCopy parts[6] = {part(qkvz, x, dk, wide, group, cd),
                              part(qkvz + dk, x + kd, dk, wide, group, cd),
                              part(qkvz + 2 * dk, x + 2 * kd, rho * dv, wide, group, cd),
                              part(qkvz + 2 * dk + rho * dv, z, rho * dv, wide, group, vd),
                              part(ba, b, rho, 2 * nv, 2 * rho, nv),
                              part(ba + rho, a, rho, 2 * nv, 2 * rho, nv)};
    ctx.be.copy_rows(parts);
  }

  LinearAttentionConfig l_;  // this rank's heads (all of them in one process)
  int64_t H_ = 0;
  LinearWeight qkvz_, ba_;              // Qwen3-Next's grouped projections
  LinearWeight q_, k_, v_, z_, b_, a_;  // Qwen3.5's flat ones (in_proj_qkv's three parts)
  LinearWeight out_;
  std::vector<float> conv_;        // [conv_dim, conv_kernel]
  std::vector<float> dt_bias_;     // [value heads]
  std::vector<float> decay_rate_;  // -exp(A_log) [value heads]
  std::vector<float> norm_;        // [value_head_dim]
};

}  // namespace

Expected<std::unique_ptr<AttentionLayer>> load_gated_deltanet(const LoadContext& lc,
                                                              const std::string& prefix) {
  auto layer = std::make_unique<GatedDeltaNet>();
  KTRY(layer->load(lc, prefix));
  return std::unique_ptr<AttentionLayer>(std::move(layer));
}

}  // namespace kestrel
