// backend/cpu/linear_plan.h — the CPU backend's one table of Linear kernels, and the plan it
// holds for each weight.
//
// A row of the table says for which weights a kernel is right — weight dtype, packing, ISA,
// compute mode, and any condition on the shape or the activation dtype — how the activations
// enter it and how the packed copy it reads is made. prepare_weight takes the first row that
// fits a weight (rows are in order of preference) and keeps it, with the copy, as the weight's
// CpuLinearPlan; linear_group() only runs what the plans say. Adding a weight format is a row and
// its kernel. MXFP4 (OCP microscaling: blocks of 32 e2m1 codes sharing one e8m0 exponent) came
// in that way: DType::MXFP4 with its block size, a row kernel per ISA over Q8S activations in
// q8_block_dot.h (the 32-element blocks line up) and one entry in the quantized rows below; a
// panel packing row with its pack function is the next step where it pays.
//
// The table is built once, read-only afterwards; plans are immutable once made, so any thread
// may read them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/float_panels.h"
#include "backend/cpu/fp8_matmul.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/kquant_panels.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/packed_matmul.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/linear_weight.h"
#include "backend/ops.h"

namespace kestrel::cpu {

// How activations enter a kernel.
enum class ActFormat : uint8_t {
  kF32,       // the f32 rows as given
  kQ8_K,      // quantized per 256-element super-block (llama.cpp's Q8_K, kquant_dot.h)
  kQ8S,       // Q8_0 codes with f32 d and the exact sum (q8_block_dot.h)
  kPackedQ8,  // the same values in row tiles with their scales apart (PackedActivations)
  kBf16,      // rounded to bf16, row tiles for the AMX tiles (bf16_tiles.h)
  kInt8,      // the weight's own int8 scheme (int8_matmul.h): quantized per weight
};
const char* act_format_name(ActFormat f);

// The layout of a weight's packed copy (none: kernels read the stored rows).
enum class Packing : uint8_t {
  kNone,
  kQ8Panels,
  kFloatPanels,
  kBf16Tiles,
  kInt8Panels,
  kInt4Panels,
  kFp8Panels,
  kKQuantPanels,
};
const char* packing_name(Packing p);

// Which compute modes a row serves (QuantCompute; float and FP8/I8 weights ignore the mode).
enum class ModeMatch : uint8_t { kAny, kInt8, kF32 };
bool serves(ModeMatch m, QuantCompute mode);

// One job of one call, as the kernel runs it: the weight's codes (or packed copy), the
// activations in the row's format, and where the outputs go.
struct LinearCall {
  const LinearWeight* w;
  const uint8_t* weights;  // the stored rows, or the packed copy
  size_t row_bytes;        // of a stored row
  int64_t n, k, m;
  const uint8_t* x;  // activation rows in the row's format, x_stride bytes apart
  size_t x_stride;
  PackedActivations packed_x;  // ActFormat::kPackedQ8
  const float* xt;             // f32 rows transposed, for the float panels of a small batch
  float* y;                    // [m, n]
  bool amx;                    // the batch is large enough for AMX, and AMX is allowed
};

struct LinearKernel;
// Computes the outputs of units [u0, u1) (weight rows, or panels of kPanelRows rows) for every
// activation row, on one thread with its arena.
using LinearRunFn = void (*)(const LinearKernel& kernel, const LinearCall& call,
                             ScratchArena& scratch, int64_t u0, int64_t u1);

struct LinearKernel {
  const char* name;
  DType dtype;
  Packing packing;
  Isa isa;
  ModeMatch mode;
  ActFormat act;
  LinearRunFn run;
  // A further condition on the weight (its shape) and the model's activation dtype; null: none.
  bool (*fits)(const Tensor& w, DType act) = nullptr;
  std::unique_ptr<uint8_t[]> (*pack)(const Tensor& w) = nullptr;  // packing != kNone
  // What `run` calls, by kind.
  DotFn dot = nullptr;  // a row kernel (for I8: over Int8Row)
  RowsDotFn rows_dot = nullptr;
  Fp8RowsFn fp8_rows = nullptr;
  Fp8PanelsFn fp8_panels = nullptr;
  int tile_rows = kMaxTileRows;
  PackedGemmFn q8_gemm = nullptr, q8_gemm_amx = nullptr;
  KQuantGemmFn kquant_gemm = nullptr;
  FloatGemmFn float_gemm = nullptr;
  bool reads_xt = false;  // float_gemm reads small batches transposed (LinearCall::xt)
  Bf16GemmFn bf16_gemm = nullptr;
  Int8GemmFn int8_gemm = nullptr, int8_gemm_amx = nullptr;

  bool panels() const { return packing != Packing::kNone; }
  // Units of work for n output rows.
  int64_t units(int64_t n) const { return panels() ? packed_panels(n) : n; }
};

// Every row this build and CPU run, for every ISA up to the best one, in order of preference.
std::span<const LinearKernel> linear_kernels();

// The first row for w at `isa` under `mode` whose packing is allowed and whose condition holds.
// Rows with a packing are skipped when `allow_packing` is false (a call on a weight that has no
// plan). Null: no kernel multiplies this dtype.
const LinearKernel* choose_linear_kernel(const Tensor& w, Isa isa, QuantCompute mode, DType act,
                                         bool allow_packing);

// The row with exactly this dtype, packing and ISA serving `mode` (its condition not checked:
// the weight met it when it was packed), or null. A call at another ISA than the plan's (a test
// capping the ISA after loading) runs the same packed copy where a row at that ISA reads it.
const LinearKernel* find_linear_kernel(DType dtype, Packing packing, Isa isa, QuantCompute mode);

// The table, one line per row, for the start-up log.
std::string describe_linear_kernels();

// A weight's plan on the CPU: its row and the packed copy the row reads (owned here).
class CpuLinearPlan final : public LinearPlan {
 public:
  CpuLinearPlan(const LinearKernel& kernel, std::unique_ptr<uint8_t[]> packed)
      : kernel_(kernel), packed_(std::move(packed)) {}
  const LinearKernel& kernel() const { return kernel_; }
  const uint8_t* packed() const { return packed_.get(); }
  std::string describe() const override;

 private:
  const LinearKernel& kernel_;
  std::unique_ptr<uint8_t[]> packed_;
};

// The plan for w: the first fitting row at the selected ISA, with its packed copy made.
std::unique_ptr<CpuLinearPlan> make_linear_plan(const Tensor& w, QuantCompute mode, DType act);
// The plan of the row with `packing` at the selected ISA (find_linear_kernel), its copy made;
// null where there is no such row. For tests and benchmarks that pin a kernel.
std::unique_ptr<CpuLinearPlan> make_linear_plan(const Tensor& w, Packing packing,
                                                QuantCompute mode = QuantCompute::kInt8);

}  // namespace kestrel::cpu
