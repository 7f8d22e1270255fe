// Feed-forward blocks: the dense SwiGLU MLP and the mixture-of-experts block built from it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/layers/mlp.h"

namespace kestrel {
namespace {

class DenseMlp final : public FfnLayer {
 public:
  // `split`: which of the plan's feature ranges this MLP's `width` features are split by.
  Status load(const LoadContext& lc, const std::string& p, int64_t width, TpSplit split) {
    H_ = lc.cfg.hidden_size;
    gelu_ = lc.cfg.hidden_act == "gelu_pytorch_tanh";
    limit_ = float(lc.cfg.moe.swiglu_limit);
    split_ = split;
    // A tensor-parallel rank: its features' rows of gate/up, and its hidden features' rows of
    // down (over every feature: the features are gathered). A replicated MLP (its range all of
    // it) runs whole on every rank.
    const IndexRange f = lc.tp ? tp_range(*lc.tp, split) : IndexRange{0, width};
    sharded_ = lc.tp != nullptr && f.size() < width;
    const IndexRange out_rows = sharded_ ? lc.tp->hidden : IndexRange{};
    I_ = f.size();
    KASSIGN(gate_, load_linear(lc.src, p + "gate_proj", width, H_, lc.cfg, lc.store, f));
    KASSIGN(up_, load_linear(lc.src, p + "up_proj", width, H_, lc.cfg, lc.store, f));
    KASSIGN(down_, load_linear(lc.src, p + "down_proj", H_, width, lc.cfg, lc.store, out_rows));
    for (const auto& [t, name] :
         {std::pair{&gate_, "gate_proj"}, {&up_, "up_proj"}, {&down_, "down_proj"}})
      lc.be.prepare_weight(*t, lc.act, p + name);
    return Status::Ok();
  }
  // From views into fused expert tensors (a tensor-parallel rank's rows already).
  void set(const LoadContext& lc, const std::string& p, Tensor gate, Tensor up, Tensor down) {
    H_ = lc.cfg.hidden_size;
    gelu_ = lc.cfg.hidden_act == "gelu_pytorch_tanh";
    limit_ = float(lc.cfg.moe.swiglu_limit);
    split_ = TpSplit::kMoeIntermediate;
    sharded_ = lc.tp != nullptr;
    I_ = gate.rows();
    gate_.w = gate;
    up_.w = up;
    down_.w = down;
    for (const auto& [t, name] :
         {std::pair{&gate_, "gate_proj"}, {&up_, "up_proj"}, {&down_, "down_proj"}})
      lc.be.prepare_weight(*t, lc.act, p + name);
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
    if (limit_ > 0) {
      // DeepSeek-V4: the gate capped at the limit, up within ±limit (limits a bf16 value holds
      // exactly, so clamping before the rounding below gives the reference's bits).
      ctx.be.clamp(g, m * I_, -std::numeric_limits<float>::infinity(), limit_);
      ctx.be.clamp(u, m * I_, -limit_, limit_);
    }
    if (gelu_) {
      ctx.be.gelu_tanh_mul(g, u, g, m * I_, ctx.act);  // Gemma's activation, rounded likewise
    } else {
      ctx.be.silu_mul(g, u, g, m * I_, ctx.act);  // rounds g and u first, and the product
    }
    if (sharded_) {
      output_projection(ctx, down_, split_, g, m, out);
    } else {
      ctx.be.linear(down_, g, m, out);  // whole (an expert-parallel rank's own expert)
      ctx.round(out, m * H_);
    }
  }

  size_t weight_bytes_per_token() const override {
    return gate_.nbytes() + up_.nbytes() + down_.nbytes();
  }

 private:
  int64_t H_ = 0, I_ = 0;
  bool gelu_ = false;
  float limit_ = 0.0f;  // DeepSeek-V4's SwiGLU clamps (0: none)
  TpSplit split_ = TpSplit::kIntermediate;
  bool sharded_ = false;  // loaded as a tensor-parallel rank's rows: its outputs are gathered
  LinearWeight gate_, up_, down_;
};

// Rows [first, first + rows) of t viewed as a [rows, cols] matrix.
Tensor rows_of(const Tensor& t, int64_t first, int64_t rows, int64_t cols) {
  Tensor v = t;
  v.shape = Shape{rows, cols};
  v.data = static_cast<const uint8_t*>(t.data) + size_t(first) * dtype_bytes(t.dtype, cols);
  return v;
}

Expected<std::unique_ptr<DenseMlp>> make_dense_mlp(const LoadContext& lc, const std::string& p,
                                                   int64_t width, TpSplit split) {
  auto m = std::make_unique<DenseMlp>();
  KTRY(m->load(lc, p, width, split));
  return m;
}

// Routed experts: the router picks k experts per token, each expert runs once over the rows of
// the tokens routed to it (experts nobody picked are skipped), and each token sums its k
// results in slot order — a fixed order, so a token's output does not depend on the batch.
// Under tensor parallelism every rank routes every token (the router is whole) and holds its
// rows of every expert, so the ranks run the same experts in the same order and meet at each
// one's gathers (model/tp_group.h). Under expert parallelism a rank holds whole experts: the
// exchange (model/expert_exchange.h) runs the rows of its TP index's experts, across the
// data-parallel ranks when they share the experts too, and the TP group gathers those blocks.
class MoeBlock final : public FfnLayer, public ExpertRows {
 public:
  Status load(const LoadContext& lc, const std::string& p, bool hash_routed) {
    const MoeConfig& m = lc.cfg.moe;
    cfg_ = m;
    H_ = lc.cfg.hidden_size;
    E_ = int(m.num_experts);
    k_ = int(m.num_experts_per_tok);
    KASSIGN(gate_, load_linear(lc.src, p + "gate", E_, H_, lc.cfg, lc.store));
    // Planned for f32 activations whatever the model's dtype: the router's logits come from the
    // f32 activations (rounded afterwards where the reference's gate is a bf16 Linear).
    lc.be.prepare_weight(gate_, DType::F32, p + "gate");
    routing_.num_experts = E_;
    routing_.top_k = k_;
    routing_.norm_topk_prob = m.norm_topk_prob;
    if (m.router == MoeConfig::Router::kGroupedSigmoid) {
      KASSIGN(bias_, load_vector(lc.src, p + "gate.e_score_correction_bias", E_));
      routing_.kind = MoeRouting::Kind::kGroupedSigmoid;
      routing_.n_group = int(m.n_group);
      routing_.topk_group = int(m.topk_group);
      routing_.routed_scaling_factor = float(m.routed_scaling_factor);
      routing_.bias = bias_.data();
    } else if (m.router == MoeConfig::Router::kSqrtSoftplus) {
      routing_.kind = MoeRouting::Kind::kSqrtSoftplus;
      routing_.routed_scaling_factor = float(m.routed_scaling_factor);
      routing_.act = lc.act;  // the reference's gate runs in the model's dtype
      if (hash_routed) {
        KTRY(load_hash_table(lc, p));
        routing_.given_ids = true;
      } else {
        KASSIGN(bias_, load_vector(lc.src, p + "gate.e_score_correction_bias", E_));
        routing_.bias = bias_.data();
      }
    }
    // Expert parallelism: this rank's experts, whole (the others stay null); else every expert,
    // split by features under tensor parallelism.
    expert_parallel_ = lc.tp && lc.tp->whole_experts;
    mine_ = expert_parallel_ ? lc.tp->experts : IndexRange{0, E_};
    if (expert_parallel_) {
      KCHECK(lc.exchange != nullptr, "expert parallelism without an expert exchange");
      layer_id_ = lc.exchange->add_layer(this);
    }
    experts_.resize(size_t(E_));
    if (lc.src.has(p + "experts.gate_up_proj")) {
      KTRY(load_fused_experts(lc, p));
    } else {
      KTRY(load_experts(lc, p));
    }
    if (m.num_shared_experts > 0) {
      const int64_t width = m.num_shared_experts * m.moe_intermediate_size;
      KASSIGN(shared_,
              make_dense_mlp(lc, p + "shared_experts.", width, TpSplit::kSharedIntermediate));
    } else if (m.shared_expert_intermediate_size > 0) {
      // Qwen3-Next / Qwen3.5: one shared expert, scaled per token by a sigmoid gate.
      KASSIGN(shared_, make_dense_mlp(lc, p + "shared_expert.", m.shared_expert_intermediate_size,
                                      TpSplit::kSharedIntermediate));
      KASSIGN(shared_gate_, load_linear(lc.src, p + "shared_expert_gate", 1, H_, lc.cfg, lc.store));
      lc.be.prepare_weight(shared_gate_, lc.act, p + "shared_expert_gate");
      has_shared_gate_ = true;
    }
    return Status::Ok();
  }

  // DeepSeek-V4's hash routing: each token id's experts (tid2eid [vocab, k], int32 or int64).
  Status load_hash_table(const LoadContext& lc, const std::string& p) {
    const int64_t V = lc.cfg.vocab_size;
    KASSIGN(const Tensor t, lc.src.get(p + "gate.tid2eid", Shape{V, k_}));
    if (t.dtype != DType::I32 && t.dtype != DType::I64)
      return make_error("{}gate.tid2eid: expert ids must be I32 or I64, not {}", p,
                        dtype_name(t.dtype));
    tid2eid_.resize(size_t(V * k_));
    for (int64_t i = 0; i < V * k_; ++i) {
      const int64_t e = t.dtype == DType::I32 ? static_cast<const int32_t*>(t.data)[i]
                                              : static_cast<const int64_t*>(t.data)[i];
      if (e < 0 || e >= E_)
        return make_error("{}gate.tid2eid: token {} names expert {} of {}", p, i / k_, e, E_);
      tid2eid_[size_t(i)] = int32_t(e);
    }
    return Status::Ok();
  }

  // One checkpoint tensor per expert and projection (how transformers saves by default).
  Status load_experts(const LoadContext& lc, const std::string& p) {
    LoadContext whole = lc;
    if (expert_parallel_) whole.tp = nullptr;  // this rank's experts are whole
    for (int64_t e = mine_.begin; e < mine_.end; ++e) {
      const std::string name = fmt::format("{}experts.{}.", p, e);
      KASSIGN(experts_[size_t(e)],
              make_dense_mlp(whole, name, cfg_.moe_intermediate_size, TpSplit::kMoeIntermediate));
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
    if (gate_up.dtype == DType::F8_E4M3 || down.dtype == DType::F8_E4M3)
      return make_error("{}experts: fused FP8 expert tensors are not supported", p);
    // A tensor-parallel rank's rows: its features of gate and up, its hidden rows of down (its
    // experts whole under expert parallelism).
    const bool split = lc.tp && !expert_parallel_ && lc.tp->moe_intermediate.size() < I;
    const IndexRange f = split ? lc.tp->moe_intermediate : IndexRange{0, I};
    const IndexRange h = split ? lc.tp->hidden : IndexRange{0, H_};
    LoadContext view = lc;
    if (!split) view.tp = nullptr;
    for (int64_t e = mine_.begin; e < mine_.end; ++e) {
      auto expert = std::make_unique<DenseMlp>();
      expert->set(view, fmt::format("{}experts.{}.", p, e),
                  rows_of(gate_up, e * 2 * I + f.begin, f.size(), H_),
                  rows_of(gate_up, e * 2 * I + I + f.begin, f.size(), H_),
                  rows_of(down, e * H_ + h.begin, h.size(), I));
      experts_[size_t(e)] = std::move(expert);
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
    // DeepSeek-V3's router runs in f32 whatever the activation dtype; Qwen3-MoE's and
    // DeepSeek-V4's gates are Linears in the activation dtype.
    if (routing_.kind != MoeRouting::Kind::kGroupedSigmoid) ctx.round(logits, T * E_);
    if (routing_.given_ids) {
      KCHECK(ctx.token_ids != nullptr, "hash routing needs the batch's token ids");
      for (int64_t t = 0; t < T; ++t) {
        const int32_t id = ctx.token_ids[t];
        KCHECK(id >= 0 && int64_t(id) * k_ < int64_t(tid2eid_.size()), "token id {} out of range",
               id);
        std::copy_n(tid2eid_.begin() + int64_t(id) * k_, k_, ids_.begin() + t * k_);
      }
    }
    be.moe_route(logits, T, routing_, ids_.data(), w);

    // Each expert runs on its contiguous rows of the permuted batch, in place of copies per
    // expert; the combine reads the results back by (token, slot).
    float* in = ctx.scratch.get(kSlotMoeIn, T * k_ * H_);
    float* res = ctx.scratch.get(kSlotMoeOut, T * k_ * H_);
    be.moe_permute(h, T, H_, ids_.data(), k_, E_, perm_, in);
    if (expert_parallel_) {
      // This TP index's experts' rows (a contiguous block of the permuted rows), computed here
      // or by the data-parallel peers holding them; the TP group gathers every index's block,
      // then combines as one process does.
      KCHECK(ctx.experts != nullptr, "an expert-parallel MoE layer run without its exchange");
      ctx.experts->run(ctx, layer_id_, in, perm_.offsets, res);
      if (ctx.tp != nullptr) {
        TpGroup& tp = *ctx.tp;
        const TpShard& shard = tp.shard();
        rank_rows_.resize(size_t(tp.size()));
        for (int r = 0; r < tp.size(); ++r) {
          const IndexRange ex = tp_index_experts(E_, r, tp.size(), shard.dp.size);
          rank_rows_[size_t(r)] =
              IndexRange{perm_.offsets[size_t(ex.begin)], perm_.offsets[size_t(ex.end)]};
        }
        float* all = ctx.scratch.get(kSlotTpIn, T * k_ * H_);
        tp.gather_rows(res + rank_rows_[size_t(shard.rank)].begin * H_, rank_rows_, H_, all);
        const RowCopy back{
            .src = all, .dst = res, .rows = T * k_, .width = H_, .src_row = H_, .dst_row = H_};
        be.copy_rows({&back, 1});
      }
    } else {
      for (int64_t e = 0; e < E_; ++e) {
        const int32_t b = perm_.offsets[size_t(e)], n = perm_.offsets[size_t(e) + 1] - b;
        if (n > 0) experts_[size_t(e)]->run(ctx, in + int64_t(b) * H_, n, res + int64_t(b) * H_);
      }
    }
    // Qwen3-MoE and DeepSeek-V4 (as transformers runs them) round each weighted result and each
    // partial sum to the activation dtype; DeepSeek-V3 sums in f32 and rounds once.
    be.moe_combine(res, perm_, w, T, k_, H_, routing_.kind != MoeRouting::Kind::kGroupedSigmoid,
                   ctx.act, out);
    if (shared_) {
      float* s = ctx.scratch.get(kSlotMoeShared, T * H_);
      shared_->run(ctx, h, T, s);
      if (has_shared_gate_) {
        // s · sigmoid(gate · h): the gate logit, its sigmoid and the product each rounded.
        float* g = ctx.scratch.get(kSlotMoeWeights, T);
        be.linear(shared_gate_, h, T, g);
        be.sigmoid_mul(s, g, T, H_, 1, ctx.act);
      }
      be.add_inplace(out, s, T * H_);
      ctx.round(out, T * H_);
    }
  }

  // One expert's weights (they are all the same size); 0 on a rank that holds none.
  size_t expert_bytes() const {
    return mine_.size() > 0 ? experts_[size_t(mine_.begin)]->weight_bytes_per_token() : 0;
  }

  void run_expert(const LayerContext& ctx, int e, const float* in, int64_t n, float* out) override {
    KCHECK(experts_[size_t(e)] != nullptr, "expert {} is not on this rank", e);
    experts_[size_t(e)]->run(ctx, in, n, out);
  }

  // Under expert parallelism a token's k experts are spread over the ranks: counted as k
  // experts' bytes over the rank's share (mine_ of E).
  size_t weight_bytes_per_token() const override {
    size_t b = gate_.nbytes() + size_t(k_) * expert_bytes() * size_t(mine_.size()) / size_t(E_);
    if (shared_) b += shared_->weight_bytes_per_token() + shared_gate_bytes();
    return b;
  }
  size_t resident_bytes() const override {
    size_t b = gate_.nbytes() + size_t(mine_.size()) * expert_bytes();
    if (shared_) b += shared_->weight_bytes_per_token() + shared_gate_bytes();
    return b;
  }

 private:
  size_t shared_gate_bytes() const { return has_shared_gate_ ? shared_gate_.nbytes() : 0; }

  MoeConfig cfg_;
  int64_t H_ = 0;
  int E_ = 0, k_ = 0;
  LinearWeight gate_;
  std::vector<float> bias_;
  std::vector<std::unique_ptr<DenseMlp>> experts_;  // null: another rank's (expert parallelism)
  IndexRange mine_;                                 // the experts this rank runs
  bool expert_parallel_ = false;
  int layer_id_ = -1;                  // with the exchange
  std::vector<IndexRange> rank_rows_;  // each TP rank's block of permuted rows
  std::unique_ptr<DenseMlp> shared_;
  LinearWeight shared_gate_;  // [1, hidden]: Qwen's per-token scale of the shared expert
  bool has_shared_gate_ = false;
  std::vector<int32_t> ids_;
  std::vector<int32_t> tid2eid_;  // DeepSeek-V4's hash-routed layers: [vocab, k]
  MoeRouting routing_;
  MoePermutation perm_;
};

}  // namespace

Expected<std::unique_ptr<FfnLayer>> load_dense_mlp(const LoadContext& lc, const std::string& prefix,
                                                   int64_t width) {
  KASSIGN(auto m, make_dense_mlp(lc, prefix, width, TpSplit::kIntermediate));
  return std::unique_ptr<FfnLayer>(std::move(m));
}

Expected<std::unique_ptr<FfnLayer>> load_layer_ffn(const LoadContext& lc, const std::string& prefix,
                                                   int64_t layer) {
  if (lc.cfg.moe.is_moe_layer(layer)) return load_moe(lc, prefix);
  return load_dense_mlp(lc, prefix, lc.cfg.intermediate_size);
}

Expected<std::unique_ptr<FfnLayer>> load_moe(const LoadContext& lc, const std::string& prefix,
                                             bool hash_routed) {
  auto m = std::make_unique<MoeBlock>();
  KTRY(m->load(lc, prefix, hash_routed));
  return std::unique_ptr<FfnLayer>(std::move(m));
}

}  // namespace kestrel
