// model/layers/mlp.h — feed-forward parts: the dense SwiGLU (or GeGLU) MLP and the mixture of
// experts built from it.
#pragma once

#include "model/layers/layer.h"

namespace kestrel {

// down(act(gate(h)) · up(h)), with `width` intermediate features; tensors under `prefix`.
Expected<std::unique_ptr<FfnLayer>> load_dense_mlp(const LoadContext& lc, const std::string& prefix,
                                                   int64_t width);
// Layer `layer`'s feed-forward part as cfg.moe places the experts: load_moe on a sparse layer,
// load_dense_mlp of intermediate_size on the others.
Expected<std::unique_ptr<FfnLayer>> load_layer_ffn(const LoadContext& lc, const std::string& prefix,
                                                   int64_t layer);
// Routed experts (plus DeepSeek's shared experts or Qwen's gated shared expert) as cfg.moe
// describes; tensors under `prefix` (…mlp.). `hash_routed`: DeepSeek-V4's first layers, whose
// experts the token id picks (gate.tid2eid).
Expected<std::unique_ptr<FfnLayer>> load_moe(const LoadContext& lc, const std::string& prefix,
                                             bool hash_routed = false);

}  // namespace kestrel
