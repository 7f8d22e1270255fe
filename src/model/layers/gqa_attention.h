// model/layers/gqa_attention.h — grouped-query attention over the paged KV cache (Llama, Mistral,
// Qwen2/3, Qwen3-MoE, Gemma3, and the gated full-attention layers of Qwen3-Next / Qwen3.5).
#pragma once

#include "model/layers/layer.h"

namespace kestrel {

// q/k/v biases (cfg.attention_bias), per-head q/k RMSNorm (cfg.qk_norm), an output gate
// (cfg.attn_output_gate), the layer's sliding window and the KV cache's scales, as the config
// and checkpoint say; tensors under `prefix` (…self_attn.).
Expected<std::unique_ptr<AttentionLayer>> load_gqa_attention(const LoadContext& lc,
                                                             const std::string& prefix);

}  // namespace kestrel
