// backend/cpu/rope.h — rotary position embedding applied in place to [tokens, heads, head_dim].
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kestrel::cpu {

struct RopeParams {
  const float* inv_freq = nullptr;  // rot_dim / 2 frequencies
  int rot_dim = 0;                  // rotated width at the start of each head (≤ head_dim)
  float attention_factor = 1.0f;    // multiplies cos and sin (YaRN)
  bool interleaved = false;         // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  // BF16/F16: cos, sin, both products and the sum are rounded to that dtype, as a model with
  // activations of that dtype computes them.
  DType act = DType::F32;
};

// x: [n_tokens, n_heads, head_dim]; positions: one per token.
void apply_rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeParams& p);

}  // namespace kestrel::cpu
