// model/layers/dsv4_attention.h — DeepSeek-V4's attention (deepseek-v4-family.md §2.4): a
// low-rank query normed per head, one shared key-value head (the key is the value), RoPE on the
// last rope dims of both, a per-head sink in the softmax, the inverse rotation of the output at
// the query's position, and a grouped low-rank output projection. Window-only layers here;
// compressed layers (CSA, HCA) are refused at load.
#pragma once

#include "model/layers/layer.h"

namespace kestrel {

// Tensors under `prefix` (…self_attn.) in transformers' names; the model's WeightSource maps
// them to the released layout's (attn.wq_a, …) where the checkpoint uses those.
Expected<std::unique_ptr<AttentionLayer>> load_dsv4_attention(const LoadContext& lc,
                                                              const std::string& prefix);

}  // namespace kestrel
