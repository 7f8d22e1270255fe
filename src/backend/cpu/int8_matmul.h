// backend/cpu/int8_matmul.h — the linear() kernels for I8 weights with one scale per output row
// (msModelSlim's W8A8_DYNAMIC and W8A8, see WeightScales): int8 activations times int8
// weights summed exactly in int32 over the whole row, then one float epilogue per output,
//   y[m][n] = float(Σ_k q_x[m][k] · w[n][k] + bias[n]) · a[m] · s_w[n],
// with per-token activations a[m] = max|x[m]| / 127, q_x = round(x / a) and bias 0, or per
// tensor a = 1, q_x = clamp(round(x / act_scale + act_offset), -128, 127), bias = row_bias and
// s_w the checkpoint's deq_scale. An integer sum has no order, so no output depends on the batch,
// the tile or the thread split, and every ISA gives the same bits.
//
// A kernel has the DotFn contract of matmul_kernels.h, except that `w` points to an Int8Row.
// Activation rows are int8_activation_row_bytes(k) apart: the row's a (f32) in a 64-byte header,
// then its k codes stored as q + 128 (u8, VNNI's unsigned operand), zero-padded to 64 bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/linear_weight.h"

namespace kestrel::cpu {

struct Int8Row {
  const int8_t* codes;
  float scale;   // s_w[n]
  int32_t bias;  // added to the integer sum
};

constexpr size_t kInt8ActHeaderBytes = 64;
size_t int8_activation_row_bytes(int64_t k);
// One activation row of a weight's scheme (its act_scale, act_offset) into `dst`.
void quantize_int8_row(const WeightScales& w, const float* x, int64_t k, uint8_t* dst);
// Weight row j of an I8 tensor with its scale and bias.
Int8Row int8_row(const LinearWeight& w, int64_t j);

struct Int8Kernels {
  DotFn dot;      // w: const Int8Row*; x: int8_activation rows
  int tile_rows;  // activation rows per call, at most kMaxWideTileRows
};

// The GEMMs (AVX-512 VNNI; AMX from a few rows, int8_gemm_amx.cc; AVX2 on int16-widened codes,
// int8_packed_avx2.cc): I8 weights packed
// into panels of kPanelRows rows, each block of 32 columns as 8 quad rows of 64 bytes (quad row
// q: bytes 4n..4n+3 are columns 4q..4q+3 of the panel's row n, as packed_matmul.h lays out Q8_0),
// after a 64-byte vector of the rows' column sums (int32, for the +128 of the activation codes).
// Columns are padded with zero codes to a multiple of 64 (two blocks: one AMX weight tile) and a
// last partial panel with zero rows. One dpbusd per quad row per activation row, the integer sums
// kept across every block, the same epilogue as the row kernels: the same bits.
size_t int8_packed_panel_bytes(int64_t k);
std::unique_ptr<uint8_t[]> pack_int8_weight(const Tensor& w);

// I8 weights whose codes all lie in [-8, 7] (W4A8's int4, widened at load) pack at half the
// bytes: the same 64-byte header, then per 64-column chunk 8 vectors of 64 bytes, vector v
// holding the chunk's quad rows v (low nibbles) and v + 8 (high nibbles) as code + 8. Decode
// reads half of the int8 panels' bytes; the kernels widen the nibbles back to the int8 codes, so
// the integer sums, and the bits, are the int8 panels'.
bool fits_int4(const Tensor& w);
size_t int4_packed_panel_bytes(int64_t k);
std::unique_ptr<uint8_t[]> pack_int4_weight(const Tensor& w);

struct Int8Gemm {
  const uint8_t* w;  // packed panels
  int64_t n, k;
  const uint8_t* x;  // m activation rows, x_stride apart (int8_activation_row_bytes)
  size_t x_stride;
  int64_t m;
  float* y;
  int64_t y_stride;
  const float* scale;   // [n]
  const int32_t* bias;  // [n] or null
  bool int4;            // w holds int4 panels (pack_int4_weight)
  // The running thread's arena (thread_scratch.h); null: buffers of the call's own.
  ScratchArena* scratch = nullptr;
};
// Computes panels [p0, p1) for every activation row.
using Int8GemmFn = void (*)(const Int8Gemm& g, int64_t p0, int64_t p1);
// nullptr when this build has no such code; callers check CPU support themselves.
Int8GemmFn avx512_int8_gemm();
Int8GemmFn avx2_int8_gemm();
// The GEMM of the ISA linear_isa() names, or nullptr where it has none (scalar; the plan table,
// linear_plan.h, has int8 panel rows at the ISAs where it is not null).
Int8GemmFn selected_int8_gemm();
// nullptr when this build, the CPU or the kernel has no AMX int8. Reads the activation rows in
// whole tiles of kPanelRows: the buffer must have int8_gemm_activation_rows(m) of them.
Int8GemmFn amx_int8_gemm();
inline int64_t int8_gemm_activation_rows(int64_t m) {
  return (m + 15) / 16 * 16;
}

const Int8Kernels& scalar_int8_kernels();
// nullptr when this build has no such code; callers check CPU support themselves.
const Int8Kernels* avx2_int8_kernels();
const Int8Kernels* avx512_int8_kernels();
// The kernels of an ISA named as linear_isa() names it, falling back to narrower ones this build
// lacks (AVX-512 VNNI, AVX2, scalar).
const Int8Kernels& int8_kernels(std::string_view isa);

}  // namespace kestrel::cpu
