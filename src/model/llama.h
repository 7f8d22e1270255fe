// model/llama.h — the dense decoder family: Llama 2/3, SmolLM2, Qwen2 (q/k/v bias), Qwen3
// (per-head q/k RMSNorm). Pre-norm blocks, GQA, SwiGLU, RoPE.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/weight_source.h"

namespace kestrel {

// Reads every tensor from `src` (checked against the config's shapes). The source must outlive
// the model (tensors are views into it). `act_dtype` (F32, BF16 or F16) is the precision
// activations are rounded to between ops; `kv_dtype` (F32, F16, BF16) that of the KV cache.
Expected<std::unique_ptr<CausalLM>> build_llama(const ModelConfig& cfg, DType act_dtype,
                                                DType kv_dtype, WeightSource& src,
                                                Backend& backend);

}  // namespace kestrel
