// model/arch/llama.cc — the Llama-like dense decoders: Llama 2/3, SmolLM2, Mistral (sliding
// window on every layer), Qwen2 (q/k/v biases, optional sliding windows) and Qwen3 (per-head q/k
// RMSNorm): pre-norm blocks of grouped-query attention and a dense SwiGLU. The attention's
// variants are config-driven inside the GQA layer.
#include "model/arch/family.h"
#include "model/arch/pre_norm_decoder.h"
#include "model/layers/gqa_attention.h"
#include "model/layers/mlp.h"

namespace kestrel {
namespace {

class LlamaModel final : public PreNormDecoder {
 public:
  using PreNormDecoder::PreNormDecoder;

 private:
  Expected<PreNormBlock> load_block(const LoadContext& lc, const std::string& p, int64_t) override {
    PreNormBlock b;
    KTRY(load_pre_norm_norms(lc, p, b));
    KASSIGN(b.attn, load_gqa_attention(lc, p + "self_attn."));
    KASSIGN(b.ffn, load_dense_mlp(lc, p + "mlp.", cfg_.intermediate_size));
    return b;
  }
};

constexpr const char* kArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                          "Qwen2ForCausalLM", "Qwen3ForCausalLM"};

}  // namespace

const ArchitectureFamily kLlamaFamily{"llama", kArchitectures, kFeatureSlidingWindow,
                                      make_model<LlamaModel>};

}  // namespace kestrel
