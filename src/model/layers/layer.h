// model/layers/layer.h — the two interfaces every decoder layer is built from, and what a layer
// loader is given. A token mixer is an AttentionLayer whether it attends over the paged cache or
// runs a recurrence; a feed-forward part is an FfnLayer whether dense or a mixture of experts.
// Every forward takes the block's normed input h [T, hidden] and writes out [T, hidden], rounded
// to the activation dtype. A layer owns its weights (views into the checkpoint or the
// WeightStore) and is used by the one thread that runs the model's forward.
#pragma once

#include <memory>
#include <string>

#include "model/expert_exchange.h"
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

}  // namespace kestrel
