// backend/cpu/gated_deltanet_kernels.h — the inner loops of gated_deltanet.h per ISA: the
// convolution over a run of channels of one sequence, and one token of the delta rule for one
// value head. Scalar, AVX2 and AVX-512 do the same operations in the same order per element
// (one multiply and FMAs, never reassociated), so they give the same bits; only speed differs.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace kestrel::cpu {

// Conv taps the vector kernels keep in registers.
constexpr int kMaxConvKernel = 8;

// One sequence's states as a kernel sees them, each pointer at the kernel's part of a slot (its
// first channel, or its value head).
struct SequenceStates {
  float* state;             // updated
  float* hold;              // null, or receives the state before the last token
  float* snapshots;         // null, or receives the state after token first_snapshot, ...
  int64_t snapshot_stride;  // ... and the next tokens' states this many floats apart
  int64_t first_snapshot;   // states after tokens [first_snapshot, tokens − 1) are kept
  int64_t tokens;
};

struct GatedDeltaNetKernels {
  // Channels [0, n) of one sequence's tokens, x and y rows `stride` floats apart:
  // y[t, c] = weight[c, kernel − 1]·x[t, c], then + weight[c, i]·in_i by FMA for each past input
  // i, oldest first. y is neither rounded nor activated.
  void (*conv)(const float* x, float* y, int64_t stride, const float* weight, int kernel, int64_t n,
               const SequenceStates& s);
  // One token of one value head over its state m [key_dim, value_dim]: u = Σ_r (α·m_r)·k_r by
  // FMA in r order, u = (v − u)·β, then m_r = α·m_r + k_r·u (FMA) and out = Σ_r m_r·q_r (FMA, in r
  // order), rounded to act.
  void (*delta_step)(float* m, int64_t key_dim, int64_t value_dim, const float* k, const float* q,
                     const float* v, float beta, float decay, float* out, DType act);
};

const GatedDeltaNetKernels& scalar_gated_deltanet_kernels();
const GatedDeltaNetKernels& avx2_gated_deltanet_kernels();
// nullptr when this build has no AVX-512 code.
const GatedDeltaNetKernels* avx512_gated_deltanet_kernels();

// The scalar loops over channels [c0, c1) and value columns [c0, c1): the vector kernels' tails.
void conv_channels_scalar(const float* x, float* y, int64_t stride, const float* weight, int kernel,
                          int64_t c0, int64_t c1, const SequenceStates& s);
void delta_columns_scalar(float* m, int64_t key_dim, int64_t value_dim, int64_t c0, int64_t c1,
                          const float* k, const float* q, const float* v, float beta, float decay,
                          float* out, DType act);

}  // namespace kestrel::cpu
