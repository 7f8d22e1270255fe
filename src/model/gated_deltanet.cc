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
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/layers.h"
#include "tensor/quant_formats.h"

namespace kestrel {
namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// torch's softplus (beta 1, threshold 20).
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

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
      for (Tensor* t : {&qkvz_, &ba_}) lc.be.prepare_weight(*t, lc.act);
    } else {
      // [q | k | v]: a rank's heads are a run of rows in each part.
      const int64_t cd = whole.conv_dim();
      KASSIGN(q_, linear("in_proj_qkv", cd, rows(0, dk)));
      KASSIGN(k_, linear("in_proj_qkv", cd, rows(kd, dk)));
      KASSIGN(v_, linear("in_proj_qkv", cd, rows(2 * kd, rho * dv)));
      KASSIGN(z_, linear("in_proj_z", vd, rows(0, rho * dv)));
      KASSIGN(b_, linear("in_proj_b", nv, rows(0, rho)));
      KASSIGN(a_, linear("in_proj_a", nv, rows(0, rho)));
      for (Tensor* t : {&q_, &k_, &v_, &z_, &b_, &a_}) lc.be.prepare_weight(*t, lc.act);
    }
    KASSIGN(out_, load_linear(lc.src, p + "out_proj", H_, vd, c, lc.store,
                              lc.tp ? lc.tp->hidden : IndexRange{}));
    lc.be.prepare_weight(out_, lc.act);
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
    const int64_t cd = l_.conv_dim(), vd = l_.value_dim(), nv = l_.num_value_heads;
    float* x = ctx.scratch.get(kSlotLinearQkv, T * cd);
    float* z = ctx.scratch.get(kSlotLinearZ, T * vd);
    float* b = ctx.scratch.get(kSlotLinearB, T * nv);
    float* a = ctx.scratch.get(kSlotLinearA, T * nv);
    project(ctx, h, x, z, b, a);
    reset_new_sequences(ctx, layer);
    float* y = ctx.scratch.get(kSlotLinearConv, T * cd);
    convolve(ctx, layer, x, y);
    float* core = ctx.scratch.get(kSlotLinearOut, T * vd);
    recur(ctx, layer, y, b, a, core);
    gated_norm(ctx, core, z);
    output_projection(ctx, out_, TpSplit::kLinearValue, core, T, out);
  }

  size_t weight_bytes() const override {
    size_t n = out_.nbytes();
    for (const Tensor* t : {&qkvz_, &ba_, &q_, &k_, &v_, &z_, &b_, &a_})
      if (t->data != nullptr) n += t->nbytes();
    return n;
  }

 private:
  // x [T, conv_dim] = [q | k | v], z [T, value_dim], b and a [T, value heads], each rounded to the
  // activation dtype as the reference's projections are.
  void project(const LayerContext& ctx, const float* h, float* x, float* z, float* b,
               float* a) const {
    const int64_t T = ctx.num_tokens;
    const int64_t kd = l_.key_dim(), vd = l_.value_dim(), nv = l_.num_value_heads;
    if (!l_.fused_projections) {
      // q, k and v into their own rows of scratch, then side by side into x.
      const int64_t cd = l_.conv_dim();
      float* qkv = ctx.scratch.get(kSlotLinearConv, T * cd);
      float *q = qkv, *k = q + T * kd, *v = k + T * kd;
      const LinearJob jobs[6] = {{&q_, q}, {&k_, k}, {&v_, v}, {&z_, z}, {&b_, b}, {&a_, a}};
      ctx.be.linear_group(jobs, h, T);
      for (int64_t t = 0; t < T; ++t) {
        float* xt = x + t * cd;
        std::copy_n(q + t * kd, kd, xt);
        std::copy_n(k + t * kd, kd, xt + kd);
        std::copy_n(v + t * vd, vd, xt + 2 * kd);
      }
      ctx.round(x, T * cd);
      ctx.round(z, T * vd);
      ctx.round(b, T * nv);
      ctx.round(a, T * nv);
      return;
    }
    // Qwen3-Next groups its outputs by key head g: [q_g | k_g | v of g's value heads | their z]
    // and [b of g's value heads | their a]; regroup them into the flat layout.
    const int64_t nk = l_.num_key_heads, dk = l_.key_head_dim, dv = l_.value_head_dim;
    const int64_t rho = nv / nk, wide = 2 * kd + 2 * vd;
    float* qkvz = ctx.scratch.get(kSlotLinearConv, T * wide);
    float* ba = ctx.scratch.get(kSlotAttnGate, T * 2 * nv);
    const LinearJob jobs[2] = {{&qkvz_, qkvz}, {&ba_, ba}};
    ctx.be.linear_group(jobs, h, T);
    ctx.round(qkvz, T * wide);
    ctx.round(ba, T * 2 * nv);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < nk; ++g) {
        const float* src = qkvz + t * wide + g * (2 * dk + 2 * rho * dv);
        float* xt = x + t * l_.conv_dim();
        std::copy_n(src, dk, xt + g * dk);
        std::copy_n(src + dk, dk, xt + kd + g * dk);
        std::copy_n(src + 2 * dk, rho * dv, xt + 2 * kd + g * rho * dv);
        std::copy_n(src + 2 * dk + rho * dv, rho * dv, z + t * vd + g * rho * dv);
        const float* bat = ba + t * 2 * nv + g * 2 * rho;
        std::copy_n(bat, rho, b + t * nv + g * rho);
        std::copy_n(bat + rho, rho, a + t * nv + g * rho);
      }
    }
  }

  // Where sequence s's state after its token t goes besides its slot: snapshot t - (end - 1 - n)
  // for its last n tokens before the final one; -1 for the other tokens.
  static int32_t snapshot_of(const LayerContext& ctx, size_t s, int32_t t, int32_t end) {
    if (ctx.state_snapshots.empty()) return -1;
    const int32_t first_kept = end - 1 - ctx.state_snapshots[s];
    return t >= first_kept && t < end - 1
               ? ctx.kv.draft_snapshot(ctx.state_slots[s], t - first_kept)
               : -1;
  }

  // Where sequence s's state before its final token goes besides its slot (ForwardBatch::
  // state_holds), -1: nowhere. A single-token sequence holds the state it starts from.
  static int32_t hold_of(const LayerContext& ctx, size_t s) {
    return ctx.state_holds.empty() ? -1 : ctx.state_holds[s];
  }

  // Sequences starting at position 0 start from a zero state.
  void reset_new_sequences(const LayerContext& ctx, int layer) const {
    const size_t S = ctx.query_start_loc.size() - 1;
    KCHECK(ctx.state_slots.size() == S, "{} state slots for {} sequences", ctx.state_slots.size(),
           S);
    for (size_t s = 0; s < S; ++s) {
      const int32_t first = ctx.query_start_loc[s];
      if (first == ctx.query_start_loc[s + 1] || ctx.positions[first] != 0) continue;
      float* st = ctx.kv.state(layer, ctx.state_slots[s]);
      std::fill_n(st, l_.state_floats(), 0.0f);
    }
  }

  // y = silu(causal depthwise conv of x), per sequence over its tokens in order; the slot's conv
  // state holds each channel's last conv_kernel - 1 inputs (oldest first) and is updated.
  void convolve(const LayerContext& ctx, int layer, const float* x, float* y) const {
    const int64_t cd = l_.conv_dim(), K = l_.conv_kernel,
                  S = int64_t(ctx.query_start_loc.size()) - 1;
    ctx.be.parallel_for(cd, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t s = 0; s < S; ++s) {
        const int32_t first = ctx.query_start_loc[size_t(s)];
        const int32_t end = ctx.query_start_loc[size_t(s) + 1];
        if (first == end) continue;
        float* state = ctx.kv.state(layer, ctx.state_slots[size_t(s)]);
        const int32_t hold = hold_of(ctx, size_t(s));
        for (int64_t c = c0; c < c1; ++c) {
          float* prev = state + c * (K - 1);
          const float* w = conv_.data() + c * K;
          for (int32_t t = first; t < end; ++t) {
            if (hold >= 0 && t == end - 1)
              std::copy_n(prev, K - 1, ctx.kv.state(layer, hold) + c * (K - 1));
            const float in = x[int64_t(t) * cd + c];
            float acc = w[K - 1] * in;
            for (int64_t i = 0; i < K - 1; ++i) acc += w[i] * prev[i];
            std::memmove(prev, prev + 1, size_t(K - 2) * sizeof(float));
            prev[K - 2] = in;
            y[int64_t(t) * cd + c] = acc;
            if (const int32_t snap = snapshot_of(ctx, size_t(s), t, end); snap >= 0)
              std::copy_n(prev, K - 1, ctx.kv.state(layer, snap) + c * (K - 1));
          }
        }
      }
    });
    // The conv output and its SiLU are each rounded, as the reference stores them.
    const int64_t n = ctx.num_tokens * cd;
    ctx.round(y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] * sigmoid(y[i]);
    ctx.round(y, n);
  }

  // The gated delta rule per (sequence, value head), in f32 (models.md 5.3 step 7): with
  // q, k L2-normed and q scaled by key_head_dim^-0.5, S ← α S; u = Sᵀk; S ← S + k (β (v − u))ᵀ;
  // o = Sᵀq. core [T, value_dim] gets o, rounded to the activation dtype.
  void recur(const LayerContext& ctx, int layer, const float* y, const float* b, const float* a,
             float* core) const {
    const int64_t cd = l_.conv_dim(), kd = l_.key_dim(), vd = l_.value_dim();
    const int64_t nv = l_.num_value_heads, dk = l_.key_head_dim, dv = l_.value_head_dim;
    const int64_t rho = nv / l_.num_key_heads, S = int64_t(ctx.query_start_loc.size()) - 1;
    const float sqrt_dk = std::sqrt(float(dk));
    ctx.be.parallel_for(S * nv, 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk));
      std::vector<float> u(static_cast<size_t>(dv)), o(static_cast<size_t>(dv));
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t s = item / nv, j = item % nv, kh = j / rho;
        const int32_t first = ctx.query_start_loc[size_t(s)];
        const int32_t end = ctx.query_start_loc[size_t(s) + 1];
        if (first == end) continue;
        const int64_t head_offset = l_.conv_state_floats() + j * dk * dv;
        float* M = ctx.kv.state(layer, ctx.state_slots[size_t(s)]) + head_offset;
        const int32_t hold = hold_of(ctx, size_t(s));
        for (int32_t t = first; t < end; ++t) {
          if (hold >= 0 && t == end - 1)
            std::copy_n(M, dk * dv, ctx.kv.state(layer, hold) + head_offset);
          const float* yt = y + int64_t(t) * cd;
          l2_normed(yt + kh * dk, dk, q.data());
          for (float& e : q) e /= sqrt_dk;
          l2_normed(yt + kd + kh * dk, dk, k.data());
          const float* v = yt + 2 * kd + j * dv;
          float beta = sigmoid(b[int64_t(t) * nv + j]);
          ctx.be.round_to(ctx.act, &beta, 1);  // the reference's sigmoid runs in act
          const float decay = std::exp(decay_rate_[size_t(j)] *
                                       softplus(a[int64_t(t) * nv + j] + dt_bias_[size_t(j)]));
          std::fill(u.begin(), u.end(), 0.0f);
          for (int64_t r = 0; r < dk; ++r) {
            float* row = M + r * dv;
            for (int64_t c = 0; c < dv; ++c) {
              row[c] *= decay;
              u[size_t(c)] += row[c] * k[size_t(r)];
            }
          }
          for (int64_t c = 0; c < dv; ++c) u[size_t(c)] = (v[c] - u[size_t(c)]) * beta;
          std::fill(o.begin(), o.end(), 0.0f);
          for (int64_t r = 0; r < dk; ++r) {
            float* row = M + r * dv;
            for (int64_t c = 0; c < dv; ++c) {
              row[c] += k[size_t(r)] * u[size_t(c)];
              o[size_t(c)] += row[c] * q[size_t(r)];
            }
          }
          std::copy(o.begin(), o.end(), core + int64_t(t) * vd + j * dv);
          if (const int32_t snap = snapshot_of(ctx, size_t(s), t, end); snap >= 0)
            std::copy_n(M, dk * dv, ctx.kv.state(layer, snap) + head_offset);
        }
      }
    });
    ctx.round(core, ctx.num_tokens * vd);
  }

  static void l2_normed(const float* x, int64_t n, float* out) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss + 1e-6f);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  }

  // Per value head: w · round(o · rsqrt(mean o² + eps)), rounded, times silu(z) in f32, rounded.
  void gated_norm(const LayerContext& ctx, float* core, const float* z) const {
    const int64_t rows = ctx.num_tokens * l_.num_value_heads, dv = l_.value_head_dim;
    ctx.be.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* o = core + r * dv;
        const float* g = z + r * dv;
        double ss = 0;
        for (int64_t i = 0; i < dv; ++i) ss += double(o[i]) * o[i];
        const float scale = float(1.0 / std::sqrt(ss / double(dv) + double(ctx.eps)));
        for (int64_t i = 0; i < dv; ++i) o[i] *= scale;
        ctx.be.round_to(ctx.act, o, dv);
        for (int64_t i = 0; i < dv; ++i) o[i] *= norm_[size_t(i)];
        ctx.be.round_to(ctx.act, o, dv);
        for (int64_t i = 0; i < dv; ++i) o[i] *= g[i] * sigmoid(g[i]);
        ctx.be.round_to(ctx.act, o, dv);
      }
    });
  }

  LinearAttentionConfig l_;  // this rank's heads (all of them in one process)
  int64_t H_ = 0;
  Tensor qkvz_, ba_;              // Qwen3-Next's grouped projections
  Tensor q_, k_, v_, z_, b_, a_;  // Qwen3.5's flat ones (in_proj_qkv's three parts)
  Tensor out_;
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
