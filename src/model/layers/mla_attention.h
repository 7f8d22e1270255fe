// model/layers/mla_attention.h — DeepSeek's multi-head latent attention over a latent cache.
#pragma once

#include "model/layers/layer.h"

namespace kestrel {

// MLA in its absorbed form (queries scored against the cached latents), with or without a
// low-rank query (cfg.mla.q_lora_rank); tensors under `prefix` (…self_attn.). With
// cfg.indexer (DeepSeek-V3.2) each query attends only to the keys its lightning indexer
// (lightning_indexer.h, tensors under …self_attn.indexer.) picks.
Expected<std::unique_ptr<AttentionLayer>> load_mla_attention(const LoadContext& lc,
                                                             const std::string& prefix);

}  // namespace kestrel
