// model/arch/qwen3_moe.cc — Qwen3-MoE: Qwen3's attention (per-head q/k RMSNorm) with a
// softmax-routed mixture of experts on the layers decoder_sparse_step and mlp_only_layers make
// sparse, a dense SwiGLU on the rest.
#include "model/arch/family.h"
#include "model/arch/pre_norm_decoder.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/mlp.h"

namespace kestrel {
namespace {

class Qwen3MoeModel final : public PreNormDecoder {
 public:
  using PreNormDecoder::PreNormDecoder;

 private:
  Expected<PreNormBlock> load_block(const LoadContext& lc, const std::string& p,
                                    int64_t layer) override {
    PreNormBlock b;
    KTRY(load_pre_norm_norms(lc, p, b));
    KASSIGN(b.attn, load_gqa_attention(lc, p + "self_attn."));
    KASSIGN(b.ffn, load_layer_ffn(lc, p + "mlp.", layer));
    return b;
  }
};

constexpr const char* kArchitectures[] = {"Qwen3MoeForCausalLM"};

}  // namespace

const ArchitectureFamily kQwen3MoeFamily{
    "qwen3_moe", kArchitectures, kFeatureMoe | kFeatureSlidingWindow, make_model<Qwen3MoeModel>};

}  // namespace kestrel
