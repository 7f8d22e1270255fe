// backend/cpu/ops.h — elementwise and row-wise kernels of the decoder: RMSNorm, SwiGLU, residual
// add, bias, scaling and gating, row copies, embedding lookup. All activations are f32 rows.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// y[r] = w ⊙ (x[r] · rsqrt(mean(x[r]²) + eps)) for `rows` rows of `dim`; y may alias x.
// With act = BF16/F16 the normalized value is rounded before the weight multiply and the product
// after it, as a model with activations of that dtype computes it.
void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* y,
              DType act = DType::F32);

// The residual add fused with the next norm: x[r] = round_to(act, x[r] + y[r]), then
// Backend::layer_norm.
void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t rows,
                int64_t dim, float* y, DType act);
// out[r] = rms_norm(x[r]) — one pass over the rows instead of two.
void add_rms_norm(float* x, const float* y, const float* w, float eps, int64_t rows, int64_t dim,
                  float* out, DType act = DType::F32);

// out[i] = silu(gate[i]) * up[i]; out may alias gate or up. With act BF16/F16:
// r(silu(r(gate[i])) * r(up[i])), r rounding to act (round_to's bits).
void silu_mul(const float* gate, const float* up, float* out, int64_t n, DType act = DType::F32);
// out[i] = gelu_tanh(gate[i]) * up[i], rounded as silu_mul: 0.5 x (1 + tanh(u)) with
// u = sqrt(2/pi) (x + 0.044715 x^3), computed as x / (1 + e^(-2u)) (the same function; no
// cancellation where tanh(u) is near -1). One implementation for every ISA.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n,
                   DType act = DType::F32);
// silu_mul with AVX-512 (the same bits); false, doing nothing, where this build lacks it. The
// caller checks that the CPU has AVX-512.
bool silu_mul_avx512(const float* gate, const float* up, float* out, int64_t n, DType act);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// y[r, :] += bias for each of `rows` rows of `n`.
void add_bias(float* y, const float* bias, int64_t rows, int64_t n);

// x[i] = r(x[i]·f), r rounding to act.
void scale(float* x, int64_t n, float f, DType act);

// x[i] = r(c·r(tanh(r(x[i] / c)))), r rounding to act; tanh is libm's tanhf, one implementation
// for every ISA.
void softcap(float* x, int64_t n, float c, DType act);
// The largest |x[i]| (0 for n = 0; NaNs are passed over).
float max_abs(const float* x, int64_t n);

// x[r, i] = r(x[r, i]·r(σ(r(g)))), g = gate[r·gate_dim + (gate_dim == 1 ? 0 : i)], σ the logistic
// with libm's expf (one implementation for every ISA), r rounding to act.
void sigmoid_mul(float* x, const float* gate, int64_t rows, int64_t dim, int64_t gate_dim,
                 DType act);

// Rows [r0, r1) of one RowCopy (backend/ops.h).
void copy_rows(const RowCopy& c, int64_t r0, int64_t r1);

// Rounds each value to the nearest `dt` (BF16 or F16) and back: emulates a model whose
// activations are stored in that dtype. F32 is a no-op.
void round_to(DType dt, float* x, int64_t n);
// round_to with AVX-512 (the same bits); false, doing nothing, where this build lacks it or dt
// is F32. The caller checks that the CPU has AVX-512.
bool round_to_avx512(DType dt, float* x, int64_t n);
float round_to(DType dt, float x);

// out[t, :] = table[ids[t], :] as f32, for a table of any dtype dequantize_row supports.
// Ids outside [0, rows) are a caller bug (checked).
void embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out);

}  // namespace kestrel::cpu
