// model/arch/deepseek_v4.cc — DeepSeek-V4 (deepseek-v4-family.md §1.3, §2): the residual as
// hc_mult streams mixed by manifold-constrained hyper-connections (mHC) around every sublayer,
// DeepSeek-V4 attention (model/layers/dsv4_attention.h) over a sliding window, and sqrtsoftplus
// MoE with hash-routed first layers and clamped SwiGLU experts; the streams collapse through
// hc_head before the final norm. Tensors in the released layout (layers.N.attn.wq_a,
// ffn.experts.J.w1, hc_attn_fn, embed, head, …, with or without a "model." prefix, as
// transformers also writes them) or in transformers' own names. Compressed attention (CSA,
// HCA), MTP and tensor or expert parallelism are not built yet: such configs are refused at
// load.
#include <array>
#include <string_view>

#include "base/aligned_vector.h"
#include "model/arch/family.h"
#include "model/layers/dsv4_attention.h"
#include "model/layers/mlp.h"
#include "tensor/quant_formats.h"

namespace kestrel {
namespace {

// One mHC site's parameters (f32): fn [(2 + n)·n, n·hidden], base [(2 + n)·n], scale [3].
struct HcSite {
  std::vector<float> fn, base, scale;
  HyperConnection params(const DeepseekV4Config& v, float rms_eps) const {
    return {fn.data(),       base.data(), scale.data(), int(v.hc_mult), int(v.hc_sinkhorn_iters),
            float(v.hc_eps), rms_eps};
  }
};

// A [rows, cols] parameter as f32 values.
Expected<std::vector<float>> load_matrix(WeightSource& src, const std::string& name, int64_t rows,
                                         int64_t cols) {
  KASSIGN(const Tensor t, src.get(name, Shape{rows, cols}));
  std::vector<float> out(size_t(rows * cols));
  dequantize_row(t.dtype, t.data, out.data(), rows * cols);
  return out;
}

struct V4Block {
  Norm attn_norm, ffn_norm;
  HcSite attn_hc, ffn_hc;
  std::unique_ptr<AttentionLayer> attn;
  std::unique_ptr<FfnLayer> ffn;
};

class DeepseekV4Model final : public DecoderModel {
 public:
  using DecoderModel::DecoderModel;

 private:
  Status load_layers(const LoadContext& lc) override {
    const ModelConfig& c = cfg_;
    const DeepseekV4Config& v = c.dsv4;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      if (v.compress_ratios[size_t(i)] != 0)
        return make_error(
            "layer {} is a compressed-attention layer (compress ratio {}); DeepSeek-V4's CSA and "
            "HCA layers are not built yet",
            i, v.compress_ratios[size_t(i)]);
    const int64_t H = c.hidden_size, n = v.hc_mult, width = n * H, rows = (2 + n) * n;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = fmt::format("{}layers.{}.", c.weight_prefix, i);
      V4Block b;
      KASSIGN(b.attn_norm, load_norm_with_bias(lc.src, p + "input_layernorm", H, c));
      KASSIGN(b.ffn_norm, load_norm_with_bias(lc.src, p + "post_attention_layernorm", H, c));
      for (const auto& [site, name] : {std::pair{&b.attn_hc, "attn_hc"}, {&b.ffn_hc, "ffn_hc"}}) {
        KASSIGN(site->fn, load_matrix(lc.src, p + name + ".fn", rows, width));
        KASSIGN(site->base, load_vector(lc.src, p + name + ".base", rows));
        KASSIGN(site->scale, load_vector(lc.src, p + name + ".scale", 3));
      }
      KASSIGN(b.attn, load_dsv4_attention(lc, p + "self_attn."));
      KASSIGN(b.ffn, load_moe(lc, p + "mlp.", c.moe.is_hash_layer(i)));
      blocks_.push_back(std::move(b));
    }
    // hc_head collapses the streams with pre coefficients alone: as an mHC site whose other
    // rows are zero (their results unused), so one kernel computes both.
    const std::string m = c.weight_prefix;
    KASSIGN(const std::vector<float> fn, load_matrix(lc.src, m + "hc_head.hc_fn", n, width));
    KASSIGN(const std::vector<float> base, load_vector(lc.src, m + "hc_head.hc_base", n));
    KASSIGN(const std::vector<float> scale, load_vector(lc.src, m + "hc_head.hc_scale", 1));
    head_.fn.assign(size_t(rows * width), 0.0f);
    head_.base.assign(size_t(rows), 0.0f);
    std::copy(fn.begin(), fn.end(), head_.fn.begin());
    std::copy(base.begin(), base.end(), head_.base.begin());
    head_.scale = {scale[0], 1.0f, 1.0f};
    return Status::Ok();
  }

  // The streams start as copies of the embedding; each sublayer reads their collapse and is
  // expanded back into them; hc_head's collapse is what the final norm reads.
  void run_layers(const LayerContext& ctx, float* x) override {
    const DeepseekV4Config& v = cfg_.dsv4;
    const int64_t T = ctx.num_tokens, H = cfg_.hidden_size, n = v.hc_mult;
    streams_.resize(size_t(T * n * H));
    pre_.resize(size_t(T * n));
    post_.resize(size_t(T * n));
    comb_.resize(size_t(T * n * n));
    float* X = streams_.data();
    for (int64_t j = 0; j < n; ++j) {
      const RowCopy copy{
          .src = x, .dst = X + j * H, .rows = T, .width = H, .src_row = H, .dst_row = n * H};
      be_.copy_rows({&copy, 1});
    }
    const BlockBuffers buf = block_buffers();
    const float eps = float(cfg_.rms_norm_eps);
    auto site = [&](const HcSite& hc, const Norm& norm, auto&& sublayer) {
      be_.hc_coefficients(hc.params(v, eps), X, T, H, pre_.data(), post_.data(), comb_.data());
      be_.hc_collapse(X, pre_.data(), T, int(n), H, buf.y, act_);
      ctx.rms_norm(buf.y, norm, T, H, buf.h);
      sublayer();
      be_.hc_expand(X, buf.y, post_.data(), comb_.data(), T, int(n), H, act_);
    };
    for (size_t i = 0; i < blocks_.size(); ++i) {
      V4Block& b = blocks_[i];
      site(b.attn_hc, b.attn_norm, [&] { b.attn->forward(ctx, int(i), buf.h, buf.y); });
      site(b.ffn_hc, b.ffn_norm, [&] { b.ffn->forward(ctx, buf.h, buf.y); });
    }
    be_.hc_coefficients(head_.params(v, eps), X, T, H, pre_.data(), post_.data(), comb_.data());
    be_.hc_collapse(X, pre_.data(), T, int(n), H, x, act_);
  }

  size_t layers_weight_bytes() const override {
    size_t b = 0;
    for (const V4Block& blk : blocks_)
      b += blk.attn->weight_bytes() + blk.ffn->weight_bytes_per_token();
    return b;
  }
  size_t layers_resident_bytes() const override {
    size_t b = 0;
    for (const V4Block& blk : blocks_) b += blk.attn->weight_bytes() + blk.ffn->resident_bytes();
    return b;
  }

  std::vector<V4Block> blocks_;
  HcSite head_;
  AlignedVector<float> streams_;  // [T, hc_mult, hidden]
  std::vector<float> pre_, post_, comb_;
};

// transformers' name of a tensor → the released layout's, per part of the name.
constexpr std::array<std::pair<std::string_view, std::string_view>, 23> kReleasedNames = {{
    {"self_attn.q_a_proj.", "attn.wq_a."},
    {"self_attn.q_a_norm.", "attn.q_norm."},
    {"self_attn.q_b_proj.", "attn.wq_b."},
    {"self_attn.kv_proj.", "attn.wkv."},
    {"self_attn.kv_norm.", "attn.norm."},
    {"self_attn.o_a_proj.", "attn.wo_a."},
    {"self_attn.o_b_proj.", "attn.wo_b."},
    {"self_attn.sinks", "attn.attn_sink"},
    {"input_layernorm.", "attn_norm."},
    {"post_attention_layernorm.", "ffn_norm."},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.", "ffn."},
    {"gate_proj.", "w1."},
    {"up_proj.", "w3."},
    {"down_proj.", "w2."},
    {"weight_scale_inv", "scale"},
    {"hc_head.hc_", "hc_head_"},
}};

std::vector<std::string> released_names(const std::string& name) {
  // The router has no Linear bias: the released ffn.gate.bias is its selection bias.
  if (name.ends_with("mlp.gate.bias")) return {};
  std::string r = name;
  for (const auto& [from, to] : kReleasedNames)
    if (const size_t at = r.find(from); at != std::string::npos) r.replace(at, from.size(), to);
  if (r == "lm_head.weight") r = "head.weight";
  if (r == "model.embed_tokens.weight") r = "model.embed.weight";
  std::vector<std::string> out;
  if (r != name) out.push_back(r);
  // Released checkpoints have no "model." prefix.
  if (r.starts_with("model.")) out.push_back(r.substr(6));
  return out;
}

constexpr const char* kArchitectures[] = {"DeepseekV4ForCausalLM"};

}  // namespace

const ArchitectureFamily kDeepseekV4Family{"deepseek_v4", kArchitectures,
                                           kFeatureMoe | kFeatureHyperConnections |
                                               kFeatureSlidingWindow | kFeatureZeroCentredNorms |
                                               kFeatureMtp,
                                           make_model<DeepseekV4Model>, released_names};

}  // namespace kestrel
