// backend/cpu/rope.h — rotary position embedding applied in place to [tokens, heads, head_dim].
#pragma once

#include <cstdint>

#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

// x: [n_tokens, n_heads, head_dim]; positions: one per token. `scratch`: the calling thread's
// arena (thread_scratch.h); null: buffers of this call's own.
void apply_rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeParams& p, ScratchArena* scratch = nullptr);

}  // namespace kestrel::cpu
