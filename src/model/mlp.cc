// Feed-forward blocks: the dense SwiGLU MLP and the mixture-of-experts block built from it.
#include <algorithm>

#include "backend/cpu/moe_routing.h"
#include "backend/cpu/ops.h"
#include "model/layers.h"

namespace kestrel {
namespace {

class DenseMlp final : public FfnLayer {
 public:
  Status load(const LoadContext& lc, const std::string& p, int64_t width) {
    H_ = lc.cfg.hidden_size;
    I_ = width;
    KASSIGN(gate_, load_linear(lc.src, p + "gate_proj", I_, H_, lc.cfg, lc.store));
    KASSIGN(up_, load_linear(lc.src, p + "up_proj", I_, H_, lc.cfg, lc.store));
    KASSIGN(down_, load_linear(lc.src, p + "down_proj", H_, I_, lc.cfg, lc.store));
    for (Tensor* t : {&gate_, &up_, &down_}) lc.be.prepare_weight(*t);
    return Status::Ok();
  }
  // From views into fused expert tensors.
  void set(const LoadContext& lc, Tensor gate, Tensor up, Tensor down) {
    H_ = lc.cfg.hidden_size;
    I_ = gate.rows();
    gate_ = gate;
    up_ = up;
    down_ = down;
    for (Tensor* t : {&gate_, &up_, &down_}) lc.be.prepare_weight(*t);
  }

  void forward(const LayerContext& ctx, const float* h, float* out) override {
    run(ctx, h, ctx.num_tokens, out);
  }
  // The same over any m rows (the MoE block runs an expert on its own tokens).
  void run(const LayerContext& ctx, const float* h, int64_t m, float* out) {
    float* g = ctx.scratch.get(kSlotMlpGate, m * I_);
    float* u = ctx.scratch.get(kSlotMlpUp, m * I_);
    const LinearJob gate_up[2] = {{&gate_, g}, {&up_, u}};
    ctx.be.linear_group(gate_up, h, m);
    ctx.round(g, m * I_);
    ctx.round(u, m * I_);
    ctx.be.silu_mul(g, u, g, m * I_);
    ctx.round(g, m * I_);
    ctx.be.linear(down_, g, m, out);
    ctx.round(out, m * H_);
  }

  size_t weight_bytes_per_token() const override {
    return gate_.nbytes() + up_.nbytes() + down_.nbytes();
  }

 private:
  int64_t H_ = 0, I_ = 0;
  Tensor gate_, up_, down_;
};

// Rows [first, first + rows) of t viewed as a [rows, cols] matrix.
Tensor rows_of(const Tensor& t, int64_t first, int64_t rows, int64_t cols) {
  Tensor v = t;
  v.shape = Shape{rows, cols};
  v.data = static_cast<const uint8_t*>(t.data) + size_t(first) * dtype_bytes(t.dtype, cols);
  return v;
}

Expected<std::unique_ptr<DenseMlp>> make_dense_mlp(const LoadContext& lc, const std::string& p,
                                                   int64_t width) {
  auto m = std::make_unique<DenseMlp>();
  KTRY(m->load(lc, p, width));
  return m;
}

// Routed experts: the router picks k experts per token, each expert runs once over the rows of
// the tokens routed to it (experts nobody picked are skipped), and each token sums its k
// results in slot order — a fixed order, so a token's output does not depend on the batch.
// Expert parallelism slots in at the grouping step: a rank would run only its own experts'
// groups and exchange the pair rows with the others.
class MoeBlock final : public FfnLayer {
 public:
  Status load(const LoadContext& lc, const std::string& p) {
    const MoeConfig& m = lc.cfg.moe;
    cfg_ = m;
    H_ = lc.cfg.hidden_size;
    E_ = int(m.num_experts);
    k_ = int(m.num_experts_per_tok);
    KASSIGN(gate_, load_linear(lc.src, p + "gate", E_, H_, lc.cfg, lc.store));
    if (m.router == MoeConfig::Router::kGroupedSigmoid) {
      KASSIGN(bias_, load_vector(lc.src, p + "gate.e_score_correction_bias", E_));
    }
    experts_.reserve(E_);
    if (lc.src.has(p + "experts.gate_up_proj")) {
      KTRY(load_fused_experts(lc, p));
    } else {
      KTRY(load_experts(lc, p));
    }
    if (m.num_shared_experts > 0) {
      const int64_t width = m.num_shared_experts * m.moe_intermediate_size;
      KASSIGN(shared_, make_dense_mlp(lc, p + "shared_experts.", width));
    }
    return Status::Ok();
  }

  // One checkpoint tensor per expert and projection (how transformers saves by default).
  Status load_experts(const LoadContext& lc, const std::string& p) {
    for (int e = 0; e < E_; ++e) {
      const std::string name = fmt::format("{}experts.{}.", p, e);
      KASSIGN(auto expert, make_dense_mlp(lc, name, cfg_.moe_intermediate_size));
      experts_.push_back(std::move(expert));
    }
    return Status::Ok();
  }

  // transformers 5.x's in-memory layout, on disk in some checkpoints (Qwen3.5-MoE releases,
  // save_original_format=False): experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then
  // its up rows) and experts.down_proj [E, H, I]. Experts become row views into them.
  Status load_fused_experts(const LoadContext& lc, const std::string& p) {
    const int64_t I = cfg_.moe_intermediate_size;
    KASSIGN(const Tensor gate_up, lc.src.get(p + "experts.gate_up_proj", Shape{E_, 2 * I, H_}));
    KASSIGN(const Tensor down, lc.src.get(p + "experts.down_proj", Shape{E_, H_, I}));
    if (gate_up.block_scale != nullptr || down.block_scale != nullptr ||
        gate_up.dtype == DType::F8_E4M3 || down.dtype == DType::F8_E4M3)
      return make_error("{}experts: fused FP8 expert tensors are not supported", p);
    for (int e = 0; e < E_; ++e) {
      auto expert = std::make_unique<DenseMlp>();
      expert->set(lc, rows_of(gate_up, int64_t(e) * 2 * I, I, H_),
                  rows_of(gate_up, int64_t(e) * 2 * I + I, I, H_),
                  rows_of(down, int64_t(e) * H_, H_, I));
      experts_.push_back(std::move(expert));
    }
    return Status::Ok();
  }

  void forward(const LayerContext& ctx, const float* h, float* out) override {
    const int64_t T = ctx.num_tokens;
    Backend& be = ctx.be;
    float* logits = ctx.scratch.get(kSlotMoeLogits, T * E_);
    be.linear(gate_, h, T, logits);
    ids_.resize(size_t(T * k_));
    float* w = ctx.scratch.get(kSlotMoeWeights, T * k_);
    if (cfg_.router == MoeConfig::Router::kGroupedSigmoid) {
      // DeepSeek's router runs in f32 whatever the activation dtype.
      cpu::route_grouped_sigmoid(logits, bias_.data(), T, E_, k_, int(cfg_.n_group),
                                 int(cfg_.topk_group), cfg_.norm_topk_prob,
                                 float(cfg_.routed_scaling_factor), ids_.data(), w);
    } else {
      ctx.round(logits, T * E_);  // Qwen3-MoE's gate is a Linear in the activation dtype
      cpu::route_softmax_topk(logits, T, E_, k_, cfg_.norm_topk_prob, ids_.data(), w);
    }
    cpu::group_by_expert(ids_.data(), T, k_, E_, groups_);

    float* pairs = ctx.scratch.get(kSlotMoePairs, T * k_ * H_);
    for (int e = 0; e < E_; ++e) {
      const int32_t b = groups_.offsets[e], n = groups_.offsets[e + 1] - b;
      if (n == 0) continue;
      float* in = ctx.scratch.get(kSlotMoeIn, int64_t(n) * H_);
      float* res = ctx.scratch.get(kSlotMoeOut, int64_t(n) * H_);
      for (int32_t i = 0; i < n; ++i)
        std::copy_n(h + int64_t(groups_.token[b + i]) * H_, H_, in + int64_t(i) * H_);
      experts_[e]->run(ctx, in, n, res);
      for (int32_t i = 0; i < n; ++i)
        std::copy_n(res + int64_t(i) * H_, H_, pairs + int64_t(groups_.slot[b + i]) * H_);
    }
    combine(ctx, pairs, w, T, out);
    if (shared_) {
      float* s = ctx.scratch.get(kSlotMoeShared, T * H_);
      shared_->run(ctx, h, T, s);
      be.add_inplace(out, s, T * H_);
      ctx.round(out, T * H_);
    }
  }

  size_t weight_bytes_per_token() const override {
    size_t b = gate_.nbytes() + size_t(k_) * experts_[0]->weight_bytes_per_token();
    if (shared_) b += shared_->weight_bytes_per_token();
    return b;
  }
  size_t resident_bytes() const override {
    size_t b = gate_.nbytes() + size_t(E_) * experts_[0]->weight_bytes_per_token();
    if (shared_) b += shared_->weight_bytes_per_token();
    return b;
  }

 private:
  // out[t] = Σ_j w[t, j] · pairs[t·k + j]. Qwen3-MoE (as transformers runs it) rounds each
  // weighted result and each partial sum to the activation dtype; DeepSeek sums in f32 and
  // rounds once.
  void combine(const LayerContext& ctx, const float* pairs, const float* w, int64_t T,
               float* out) const {
    const bool round_each = cfg_.router == MoeConfig::Router::kSoftmaxTopK;
    const DType act = ctx.act;
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + t * H_;
      std::fill_n(o, H_, 0.0f);
      for (int j = 0; j < k_; ++j) {
        const float* p = pairs + (t * k_ + j) * H_;
        if (round_each) {
          const float wj = cpu::round_to(act, w[t * k_ + j]);
          for (int64_t i = 0; i < H_; ++i)
            o[i] = cpu::round_to(act, o[i] + cpu::round_to(act, p[i] * wj));
        } else {
          const float wj = w[t * k_ + j];
          for (int64_t i = 0; i < H_; ++i) o[i] += p[i] * wj;
        }
      }
    }
    ctx.round(out, T * H_);
  }

  MoeConfig cfg_;
  int64_t H_ = 0;
  int E_ = 0, k_ = 0;
  Tensor gate_;
  std::vector<float> bias_;
  std::vector<std::unique_ptr<DenseMlp>> experts_;
  std::unique_ptr<DenseMlp> shared_;
  std::vector<int32_t> ids_;
  cpu::ExpertGroups groups_;
};

}  // namespace

Expected<std::unique_ptr<FfnLayer>> load_dense_mlp(const LoadContext& lc, const std::string& prefix,
                                                   int64_t width) {
  KASSIGN(auto m, make_dense_mlp(lc, prefix, width));
  return std::unique_ptr<FfnLayer>(std::move(m));
}

Expected<std::unique_ptr<FfnLayer>> load_moe(const LoadContext& lc, const std::string& prefix) {
  auto m = std::make_unique<MoeBlock>();
  KTRY(m->load(lc, prefix));
  return std::unique_ptr<FfnLayer>(std::move(m));
}

}  // namespace kestrel
