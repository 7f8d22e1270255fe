// model/arch/family.h — how an architecture family registers: the Hugging Face `architectures`
// names its file serves, the config features it implements, and its constructor. The table of
// families is model/arch/registry.cc; a config that asks for a feature its architecture's family
// does not implement is refused at load, naming both.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/arch/decoder_model.h"

namespace kestrel {

// What a parsed config can ask of a model beyond pre-norm GQA blocks with dense MLPs.
enum ModelFeature : unsigned {
  kFeatureMoe = 1u << 0,                // routed experts
  kFeatureMla = 1u << 1,                // multi-head latent attention
  kFeatureLinearAttention = 1u << 2,    // Gated DeltaNet layers
  kFeatureGatedAttention = 1u << 3,     // an output gate on attention (attn_output_gate)
  kFeatureSlidingWindow = 1u << 4,      // sliding-window attention layers
  kFeatureZeroCentredNorms = 1u << 5,   // RMSNorm scales of 1 + w
  kFeatureSandwichNorms = 1u << 6,      // norms after the attention and the FFN (Gemma)
  kFeatureScaledEmbeddings = 1u << 7,   // embedding rows × sqrt(hidden) (Gemma)
  kFeatureLogitSoftcap = 1u << 8,       // c · tanh(logits / c) (Gemma)
  kFeatureLocalRope = 1u << 9,          // a RoPE base of their own on sliding-window layers
  kFeatureMtp = 1u << 10,               // multi-token-prediction modules
  kFeatureSparseIndexer = 1u << 11,     // DeepSeek Sparse Attention's lightning indexer
  kFeatureHyperConnections = 1u << 12,  // DeepSeek-V4's mHC residual streams
};

// The features `cfg` asks for.
unsigned model_features(const ModelConfig& cfg);
// A feature's name as errors print it (e.g. "multi-head latent attention (kv_lora_rank)").
const char* model_feature_name(ModelFeature f);

using ModelFactory = std::unique_ptr<DecoderModel> (*)(const ModelConfig& cfg, DType act,
                                                       const KvCacheQuant& kv, Backend& backend,
                                                       const TensorParallel& tp);

// The ModelFactory of a family's model class.
template <class Model>
std::unique_ptr<DecoderModel> make_model(const ModelConfig& cfg, DType act, const KvCacheQuant& kv,
                                         Backend& backend, const TensorParallel& tp) {
  return std::make_unique<Model>(cfg, act, kv, backend, tp);
}

struct ArchitectureFamily {
  const char* name;  // the family's file: model/arch/<name>.cc
  std::span<const char* const> architectures;
  unsigned features;  // the ModelFeature bits it implements
  ModelFactory make;
  // Other names of a tensor its layers ask for by transformers' name (make_aliased_source);
  // null: none.
  std::vector<std::string> (*aliases)(const std::string& name) = nullptr;
};

// Each defined in its family's file.
extern const ArchitectureFamily kLlamaFamily;
extern const ArchitectureFamily kQwen3MoeFamily;
extern const ArchitectureFamily kDeepseekV3Family;
extern const ArchitectureFamily kQwen3NextFamily;
extern const ArchitectureFamily kGemma3Family;
extern const ArchitectureFamily kDeepseekV4Family;

}  // namespace kestrel
