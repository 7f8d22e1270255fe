// backend/cpu/gated_deltanet.h — Gated DeltaNet, the linear attention of Qwen3-Next and Qwen3.5:
// Backend::causal_conv1d, gated_delta_rule and gated_rms_norm (parameters in backend/ops.h).
//
// Each sequence runs token by token, prefill and decode alike; the threads split channels (the
// convolution) and (sequence, value head) pairs (the recurrence), so neither the thread split nor
// the rest of the batch changes a bit, nor how a sequence's tokens are split into steps. The
// scalar, AVX2 and AVX-512 paths (gated_deltanet_kernels.h) give the same bits: they vectorize
// over channels and over value_dim, each element taking the same multiplies and FMAs in the same
// order; the logistic, softplus and exp are libm's (expf, log1pf) on every path.
#pragma once

#include <cstdint>

#include "backend/cpu/thread_scratch.h"
#include "backend/ops.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {

// Kernels of 2 to kMaxConvKernel (8) taps, held in registers.
void causal_conv1d(const CausalConv1d& conv, const RecurrentBatch& batch, ThreadPool& pool);

// `scratch`: pool's arenas (thread_scratch.h), for the normed queries and keys.
void gated_delta_rule(const GatedDeltaRule& rule, const RecurrentBatch& batch, ThreadPool& pool,
                      ThreadScratch& scratch);

// Rows [0, rows) of Backend::gated_rms_norm; one implementation for every ISA (the logistic is
// libm's, per element).
void gated_rms_norm(float* x, const float* z, const float* w, float eps, int64_t rows, int64_t dim,
                    DType act);

}  // namespace kestrel::cpu
