// model/arch/deepseek_v3.cc — DeepSeek-V3 / V3.1, and V3.2 whose MLA layers carry the lightning
// indexer of DeepSeek Sparse Attention (model/layers/lightning_indexer.h; the same composition
// otherwise, as vLLM serves both from one file): multi-head latent attention on every layer,
// dense SwiGLU on the first first_k_dense_replace layers and DeepSeekMoE (sigmoid group-limited
// routing, shared experts) after, and the MTP module stored after the main layers
// (model.layers.<num_hidden_layers>.{enorm, hnorm, eh_proj, shared_head, …}).
#include "model/arch/family.h"
#include "model/arch/pre_norm_decoder.h"
#include "model/layers/mla_attention.h"
#include "model/layers/mlp.h"

namespace kestrel {
namespace {

class DeepseekV3Model final : public PreNormDecoder {
 public:
  using PreNormDecoder::PreNormDecoder;

 private:
  Expected<PreNormBlock> load_block(const LoadContext& lc, const std::string& p,
                                    int64_t layer) override {
    PreNormBlock b;
    KTRY(load_pre_norm_norms(lc, p, b));
    KASSIGN(b.attn, load_mla_attention(lc, p + "self_attn."));
    KASSIGN(b.ffn, load_layer_ffn(lc, p + "mlp.", layer));
    return b;
  }

  Status load_layers(const LoadContext& lc) override {
    KTRY(PreNormDecoder::load_layers(lc));
    const std::string p = fmt::format("{}layers.{}.", cfg_.weight_prefix, cfg_.num_hidden_layers);
    // A checkpoint without the module (most quantized exports drop it) serves without drafts.
    if (cfg_.num_nextn_predict_layers == 0 || !lc.src.has(p + "eh_proj.weight"))
      return Status::Ok();
    const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    auto m = std::make_unique<MtpModule>();
    KASSIGN(m->enorm, load_norm(lc.src, p + "enorm.weight", H, cfg_));
    KASSIGN(m->hnorm, load_norm(lc.src, p + "hnorm.weight", H, cfg_));
    KASSIGN(m->head_norm, load_norm_with_bias(lc.src, p + "shared_head.norm", H, cfg_));
    KASSIGN(m->eh_proj.w, lc.src.get(p + "eh_proj.weight", Shape{H, 2 * H}));
    if (lc.src.has(p + "shared_head.head.weight")) {
      KASSIGN(m->head.w, lc.src.get(p + "shared_head.head.weight", Shape{V, H}));
      m->head.w = vocab_rows(m->head.w);
      be_.prepare_weight(m->head, act_, p + "shared_head.head");
    } else {
      m->head = lm_head_;
    }
    be_.prepare_weight(m->eh_proj, act_, p + "eh_proj");
    KASSIGN(m->block, load_block(lc, p, cfg_.num_hidden_layers));
    mtp_ = std::move(m);
    return Status::Ok();
  }
};

constexpr const char* kArchitectures[] = {"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"};

}  // namespace

const ArchitectureFamily kDeepseekV3Family{
    "deepseek_v3", kArchitectures, kFeatureMoe | kFeatureMla | kFeatureSparseIndexer | kFeatureMtp,
    make_model<DeepseekV3Model>};

}  // namespace kestrel
