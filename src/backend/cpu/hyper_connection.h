// backend/cpu/hyper_connection.h — DeepSeek-V4's manifold-constrained hyper-connections (mHC):
// the mixing coefficients of the residual streams and the collapse and expand around a sublayer
// (Backend::hc_coefficients says what each computes), for a run of T tokens.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

void hc_coefficients(const HyperConnection& hc, const float* x, int64_t T, int64_t hidden,
                     float* pre, float* post, float* comb);
void hc_collapse(const float* x, const float* pre, int64_t T, int n, int64_t hidden, float* out,
                 DType act);
void hc_expand(float* x, const float* y, const float* post, const float* comb, int64_t T, int n,
               int64_t hidden, DType act);

}  // namespace kestrel::cpu
