// model/arch/qwen3_next.cc — the hybrid Qwen3-Next and Qwen3.5 text models (also inside the
// Qwen3.5 vision-language wrappers, whose vision tower is not loaded): Gated DeltaNet layers
// between gated full-attention ones as layer_types says, zero-centred norms, dense SwiGLU
// (Qwen3.5) or experts with a gated shared expert (Qwen3-Next, Qwen3.5-MoE), and the MTP module
// at the checkpoint's top level (mtp.*), whose head is the model's.
#include "model/arch/family.h"
#include "model/arch/pre_norm_decoder.h"
#include "model/layers/gated_deltanet.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/mlp.h"

namespace kestrel {
namespace {

class Qwen3NextModel final : public PreNormDecoder {
 public:
  using PreNormDecoder::PreNormDecoder;

 private:
  Expected<PreNormBlock> load_block(const LoadContext& lc, const std::string& p,
                                    int64_t layer) override {
    PreNormBlock b;
    KTRY(load_pre_norm_norms(lc, p, b));
    if (cfg_.is_linear_layer(layer)) {
      KASSIGN(b.attn, load_gated_deltanet(lc, p + "linear_attn."));
    } else {
      KASSIGN(b.attn, load_gqa_attention(lc, p + "self_attn."));
    }
    KASSIGN(b.ffn, load_layer_ffn(lc, p + "mlp.", layer));
    return b;
  }

  // The first of the module's layers is loaded; it drafts from its normed output.
  Status load_layers(const LoadContext& lc) override {
    KTRY(PreNormDecoder::load_layers(lc));
    if (cfg_.num_nextn_predict_layers == 0 || !lc.src.has("mtp.fc.weight")) return Status::Ok();
    const int64_t H = cfg_.hidden_size;
    auto m = std::make_unique<MtpModule>();
    KASSIGN(m->enorm, load_norm(lc.src, "mtp.pre_fc_norm_embedding.weight", H, cfg_));
    KASSIGN(m->hnorm, load_norm(lc.src, "mtp.pre_fc_norm_hidden.weight", H, cfg_));
    KASSIGN(m->head_norm, load_norm_with_bias(lc.src, "mtp.norm", H, cfg_));
    KASSIGN(m->eh_proj.w, lc.src.get("mtp.fc.weight", Shape{H, 2 * H}));
    be_.prepare_weight(m->eh_proj, act_, "mtp.fc");
    m->head = lm_head_;
    m->drafts_from_normed = true;
    KASSIGN(m->block, load_block(lc, "mtp.layers.0.", cfg_.num_hidden_layers));
    mtp_ = std::move(m);
    return Status::Ok();
  }
};

constexpr const char* kArchitectures[] = {
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"};

}  // namespace

const ArchitectureFamily kQwen3NextFamily{"qwen3_next", kArchitectures,
                                          kFeatureMoe | kFeatureLinearAttention |
                                              kFeatureGatedAttention | kFeatureZeroCentredNorms |
                                              kFeatureMtp,
                                          make_model<Qwen3NextModel>};

}  // namespace kestrel
