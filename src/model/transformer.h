// model/transformer.h — the decoder-only transformer every supported architecture is an instance
// of: pre-norm blocks of (GQA or MLA attention) + (dense SwiGLU or MoE), RMSNorm, LM head.
// Llama 2/3, SmolLM2, Qwen2 (q/k/v bias), Qwen3 (per-head q/k RMSNorm), Qwen3-MoE,
// DeepSeek-V3/V3.1 (MLA, DeepSeekMoE, and the MTP module stored after the main layers), and the
// hybrid Qwen3-Next / Qwen3.5 text models (Gated DeltaNet layers between gated attention ones,
// zero-centred norms, MoE with a gated shared expert).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/kv_scales.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

// Reads every tensor from `src` (checked against the config's shapes). The source must outlive
// the model (tensors are views into it). `act_dtype` (F32, BF16 or F16) is the precision
// activations are rounded to between ops; `kv` the KV cache's format (its scales are loaded
// with the attention layers).
// With `tp` enabled the model holds one rank's heads and features (model/tp_plan.h) and
// gathers the features its layers need over tp.comm (model/tp_group.h); config() is then the
// rank's.
Expected<std::unique_ptr<CausalLM>> build_transformer(const ModelConfig& cfg, DType act_dtype,
                                                      const KvCacheQuant& kv, WeightSource& src,
                                                      Backend& backend,
                                                      const TensorParallel& tp = {});

}  // namespace kestrel
