// model/arch/gemma3.cc — Gemma3 text: "sandwich" blocks that also norm the attention and FFN
// outputs (post_attention_layernorm, post_feedforward_layernorm; the FFN's input norm is then
// pre_feedforward_layernorm), zero-centred norms, GeGLU, embeddings × sqrt(hidden), softcapped
// logits, and sliding-window layers with a RoPE base of their own.
#include <cmath>

#include "model/arch/family.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/mlp.h"

namespace kestrel {
namespace {

struct SandwichBlock {
  Norm attn_norm, ffn_norm;
  std::vector<float> post_attn_norm, post_ffn_norm;
  std::unique_ptr<AttentionLayer> attn;
  std::unique_ptr<FfnLayer> ffn;
};

class Gemma3Model final : public DecoderModel {
 public:
  using DecoderModel::DecoderModel;

 private:
  Status load_layers(const LoadContext& lc) override {
    const ModelConfig& c = cfg_;
    const int64_t H = c.hidden_size;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = fmt::format("{}layers.{}.", c.weight_prefix, i);
      SandwichBlock b;
      KASSIGN(b.attn_norm, load_norm_with_bias(lc.src, p + "input_layernorm", H, c));
      KASSIGN(b.post_attn_norm, load_norm(lc.src, p + "post_attention_layernorm.weight", H, c));
      KASSIGN(b.ffn_norm, load_norm_with_bias(lc.src, p + "pre_feedforward_layernorm", H, c));
      KASSIGN(b.post_ffn_norm, load_norm(lc.src, p + "post_feedforward_layernorm.weight", H, c));
      KASSIGN(b.attn, load_gqa_attention(lc, p + "self_attn."));
      KASSIGN(b.ffn, load_dense_mlp(lc, p + "mlp.", c.intermediate_size));
      blocks_.push_back(std::move(b));
    }
    if (c.rope_local_theta > 0) {
      ModelConfig local = c;
      local.rope_theta = c.rope_local_theta;
      local.rope_scaling = RopeScaling{};
      use_local_rope(local);
    }
    return Status::Ok();
  }

  // Per block (cache layer = its index): x += post_norm(attn(norm(x))); the same for the FFN,
  // each residual add fused with the norm after it.
  void run_layers(const LayerContext& ctx, float* x) override {
    const int64_t T = ctx.num_tokens, H = cfg_.hidden_size;
    const BlockBuffers buf = block_buffers();
    const bool off = cfg_.norm_offset;
    ctx.rms_norm(x, blocks_[0].attn_norm, T, H, buf.h);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      SandwichBlock& b = blocks_[i];
      b.attn->forward(ctx, int(i), buf.h, buf.y);
      ctx.rms_norm(buf.y, b.post_attn_norm.data(), T, H, buf.y);
      add_rms_norm_rows(be_, act_, off, x, buf.y, b.ffn_norm, ctx.eps, T, H, buf.h);
      b.ffn->forward(ctx, buf.h, buf.y);
      ctx.rms_norm(buf.y, b.post_ffn_norm.data(), T, H, buf.y);
      if (i + 1 < blocks_.size()) {
        add_rms_norm_rows(be_, act_, off, x, buf.y, blocks_[i + 1].attn_norm, ctx.eps, T, H, buf.h);
      } else {
        be_.add_inplace(x, buf.y, T * H);
        ctx.round(x, T * H);
      }
    }
  }

  // Rows × sqrt(hidden), the factor in the weights' dtype as the reference casts it.
  void embed(const LayerContext& ctx, const int32_t* ids, float* x) override {
    DecoderModel::embed(ctx, ids, x);
    float f = std::sqrt(float(cfg_.hidden_size));
    be_.round_to(act_, &f, 1);
    be_.scale(x, ctx.num_tokens * cfg_.hidden_size, f, act_);
  }

  // c · tanh(logits / c), each step rounded as the reference computes it.
  void finish_logits(float* logits, int64_t rows) override {
    if (cfg_.final_logit_softcapping > 0)
      be_.softcap(logits, rows * cfg_.vocab_size, float(cfg_.final_logit_softcapping), act_);
  }

  size_t layers_weight_bytes() const override {
    size_t n = 0;
    for (const SandwichBlock& b : blocks_)
      n += b.attn->weight_bytes() + b.ffn->weight_bytes_per_token();
    return n;
  }
  size_t layers_resident_bytes() const override { return layers_weight_bytes(); }

  std::vector<SandwichBlock> blocks_;
};

constexpr const char* kArchitectures[] = {"Gemma3ForCausalLM"};

}  // namespace

const ArchitectureFamily kGemma3Family{"gemma3", kArchitectures,
                                       kFeatureSlidingWindow | kFeatureZeroCentredNorms |
                                           kFeatureSandwichNorms | kFeatureScaledEmbeddings |
                                           kFeatureLogitSoftcap | kFeatureLocalRope,
                                       make_model<Gemma3Model>};

}  // namespace kestrel
