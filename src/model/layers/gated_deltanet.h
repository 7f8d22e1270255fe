// model/layers/gated_deltanet.h — Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5).
#pragma once

#include "model/layers/layer.h"

namespace kestrel {

// Runs the delta-rule recurrence over the layer's state slots (ctx.recurrent); tensors under
// `prefix` (…linear_attn.), fused or flat projections as cfg.linear says.
Expected<std::unique_ptr<AttentionLayer>> load_gated_deltanet(const LoadContext& lc,
                                                              const std::string& prefix);

}  // namespace kestrel
