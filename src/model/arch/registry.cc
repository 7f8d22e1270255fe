#include "model/arch/registry.h"

#include <bit>

#include "model/arch/family.h"

namespace kestrel {
namespace {

const ArchitectureFamily* const kFamilies[] = {&kLlamaFamily,      &kQwen3MoeFamily,
                                               &kDeepseekV3Family, &kQwen3NextFamily,
                                               &kGemma3Family,     &kDeepseekV4Family};

const ArchitectureFamily* find_family(std::string_view architecture) {
  for (const ArchitectureFamily* f : kFamilies)
    for (const char* a : f->architectures)
      if (architecture == a) return f;
  return nullptr;
}

}  // namespace

unsigned model_features(const ModelConfig& c) {
  unsigned f = 0;
  if (c.moe.num_experts > 0) f |= kFeatureMoe;
  if (c.mla.enabled()) f |= kFeatureMla;
  if (c.linear.enabled()) f |= kFeatureLinearAttention;
  if (c.attn_output_gate) f |= kFeatureGatedAttention;
  if (!c.layer_sliding_window.empty()) f |= kFeatureSlidingWindow;
  if (c.norm_offset) f |= kFeatureZeroCentredNorms;
  if (c.sandwich_norms) f |= kFeatureSandwichNorms;
  if (c.scale_embeddings) f |= kFeatureScaledEmbeddings;
  if (c.final_logit_softcapping > 0) f |= kFeatureLogitSoftcap;
  if (c.rope_local_theta > 0) f |= kFeatureLocalRope;
  if (c.num_nextn_predict_layers > 0) f |= kFeatureMtp;
  if (c.indexer.enabled()) f |= kFeatureSparseIndexer;
  if (c.dsv4.enabled()) f |= kFeatureHyperConnections;
  return f;
}

const char* model_feature_name(ModelFeature f) {
  switch (f) {
    case kFeatureMoe:
      return "routed experts";
    case kFeatureMla:
      return "multi-head latent attention (kv_lora_rank)";
    case kFeatureLinearAttention:
      return "linear-attention layers";
    case kFeatureGatedAttention:
      return "gated attention output (attn_output_gate)";
    case kFeatureSlidingWindow:
      return "sliding-window attention";
    case kFeatureZeroCentredNorms:
      return "zero-centred RMSNorm weights";
    case kFeatureSandwichNorms:
      return "post-attention and post-feed-forward norms";
    case kFeatureScaledEmbeddings:
      return "scaled embeddings";
    case kFeatureLogitSoftcap:
      return "final_logit_softcapping";
    case kFeatureLocalRope:
      return "a RoPE base for sliding-window layers";
    case kFeatureMtp:
      return "multi-token-prediction layers (num_nextn_predict_layers)";
    case kFeatureSparseIndexer:
      return "a sparse-attention indexer (index_topk)";
    case kFeatureHyperConnections:
      return "hyper-connection residual streams (hc_mult)";
  }
  return "an unknown feature";
}

Status check_architecture(const ModelConfig& cfg) {
  const ArchitectureFamily* family = find_family(cfg.architecture);
  if (family == nullptr) {
    std::string list;
    for (const std::string& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
    return make_error("architecture '{}' is not supported (supported: {})", cfg.architecture, list);
  }
  if (const unsigned extra = model_features(cfg) & ~family->features; extra != 0)
    return make_error(
        "{} (model_type '{}') asks for {}, which the {} architecture family does not implement",
        cfg.architecture, cfg.model_type,
        model_feature_name(ModelFeature(1u << std::countr_zero(extra))), family->name);
  return Status::Ok();
}

Expected<std::unique_ptr<CausalLM>> build_model(const ModelConfig& cfg, DType act_dtype,
                                                const KvCacheQuant& kv, WeightSource& src,
                                                Backend& backend, const TensorParallel& tp) {
  KTRY(check_architecture(cfg));
  if (tp.enabled() && tp.comm == nullptr)
    return make_error("tensor parallelism: rank {} of {} has no communicator", tp.shard.rank,
                      tp.shard.size);
  const ArchitectureFamily* family = find_family(cfg.architecture);
  std::unique_ptr<DecoderModel> m = family->make(cfg, act_dtype, kv, backend, tp);
  if (family->aliases != nullptr) {
    const auto aliased = make_aliased_source(src, family->aliases);
    KTRY(m->load(*aliased));
  } else {
    KTRY(m->load(src));
  }
  return std::unique_ptr<CausalLM>(std::move(m));
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const ArchitectureFamily* f : kFamilies)
      for (const char* a : f->architectures) names.emplace_back(a);
    return names;
  }();
  return kNames;
}

std::string_view architecture_family(std::string_view architecture) {
  const ArchitectureFamily* f = find_family(architecture);
  return f != nullptr ? f->name : "";
}

}  // namespace kestrel
