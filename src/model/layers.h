// model/layers.h — the parts a decoder block is made of, behind two small interfaces so one
// model class covers dense GQA models (Llama, Qwen2/3), Qwen3-MoE, DeepSeek-V3 (MLA + MoE) and
// the hybrid Qwen3-Next / Qwen3.5 (Gated DeltaNet or gated attention, dense or MoE). A token
// mixer is an AttentionLayer whether it attends over the paged cache or runs a recurrence.
// Every forward takes the block's normed input h [T, hidden] and writes out [T, hidden], rounded
// to the activation dtype.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/kv_scales.h"
#include "model/layer_context.h"
#include "model/weights.h"

namespace kestrel {

class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  // `layer` indexes the KV cache in ctx.kv.
  virtual void forward(const LayerContext& ctx, int layer, const float* h, float* out) = 0;
  virtual size_t weight_bytes() const = 0;
};

class FfnLayer {
 public:
  virtual ~FfnLayer() = default;
  virtual void forward(const LayerContext& ctx, const float* h, float* out) = 0;
  // Bytes one token's forward reads (MoE: the shared and the routed experts it uses).
  virtual size_t weight_bytes_per_token() const = 0;
  // Bytes held (MoE: every expert).
  virtual size_t resident_bytes() const { return weight_bytes_per_token(); }
};

// What a layer loader needs besides the tensor names.
struct LoadContext {
  WeightSource& src;
  const ModelConfig& cfg;
  WeightStore& store;
  Backend& be;
  DType act;  // the model's activation dtype (Backend::prepare_weight may pack for it)
  // Tensor parallelism: this rank's heads and features (its layers load those rows of each
  // weight), and under expert parallelism its experts; null: the whole model.
  const TpShard* tp = nullptr;
  // Expert parallelism: MoE layers register with it (in load order) to run their experts.
  ExpertExchange* exchange = nullptr;
  KvCacheQuant kv;  // the KV cache's format, whose scales attention layers load
};

// Grouped-query attention with optional q/k/v biases and per-head q/k RMSNorm.
Expected<std::unique_ptr<AttentionLayer>> load_gqa_attention(const LoadContext& lc,
                                                             const std::string& prefix);
// DeepSeek's multi-head latent attention over a latent cache (absorbed form).
Expected<std::unique_ptr<AttentionLayer>> load_mla_attention(const LoadContext& lc,
                                                             const std::string& prefix);

// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) over the layer's state slots.
Expected<std::unique_ptr<AttentionLayer>> load_gated_deltanet(const LoadContext& lc,
                                                              const std::string& prefix);

// SwiGLU: down(silu(gate(h)) · up(h)), with `width` intermediate features.
Expected<std::unique_ptr<FfnLayer>> load_dense_mlp(const LoadContext& lc, const std::string& prefix,
                                                   int64_t width);
// Routed experts (plus DeepSeek's shared experts) as cfg.moe describes.
Expected<std::unique_ptr<FfnLayer>> load_moe(const LoadContext& lc, const std::string& prefix);

}  // namespace kestrel
