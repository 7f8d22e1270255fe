#include "backend/cpu/linear_plan.h"

#include <vector>

#include <fmt/format.h>

#include "backend/cpu/fp8_matmul.h"
#include "backend/cpu/kquant_dot.h"
#include "backend/cpu/linear_runs.h"
#include "backend/cpu/q8_block_dot.h"
#include "base/status.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

// QuantCompute::kF32: one weight block at a time is decoded to f32 (exactly, by the shared
// dequantizer) and dotted with every activation row of the tile.
template <DType T>
void dequant_dot(const void* w, const void* x, size_t x_stride, int nx, int64_t k, float* out,
                 int64_t out_stride) {
  const DTypeInfo& info = dtype_info(T);
  float block[QK_K];
  float acc[kMaxTileRows] = {};
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t b = 0; b < k / info.block_elems; ++b) {
    dequantize_row(T, wb + b * info.block_bytes, block, info.block_elems);
    for (int r = 0; r < nx; ++r) {
      const float* xr =
          reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + size_t(r) * x_stride) +
          b * info.block_elems;
      float s = 0.0f;
      for (int i = 0; i < info.block_elems; ++i) s += block[i] * xr[i];
      acc[r] += s;
    }
  }
  for (int r = 0; r < nx; ++r) out[r * out_stride] = acc[r];
}

bool is_matrix(const Tensor& w, DType) {
  return w.shape.ndim == 2;
}
bool fits_int4_panels(const Tensor& w, DType) {
  return w.shape.ndim == 2 && fits_int4(w);
}
bool fits_float_panels(const Tensor& w, DType) {
  return float_packable(w);
}
bool fits_q8_panels(const Tensor& w, DType) {
  return packable(w);
}
bool fits_kquant_panels(const Tensor& w, DType) {
  return kquant_packable(w);
}
// AMX bf16 tiles take activations rounded to bf16: only where the model computes in bf16, and
// only when asked for (cpu_isa.h: another arithmetic).
bool fits_bf16_tiles(const Tensor& w, DType act) {
  return act == DType::BF16 && w.shape.ndim == 2 && amx_enabled() && amx_bf16_enabled() &&
         bf16_tiles_supported();
}

// The float row kernels of an ISA: AVX-512 CPUs run the AVX2 ones (one arithmetic).
const DotKernels* dot_kernels_of(Isa isa) {
  return isa == Isa::kScalar ? &scalar_dot_kernels() : avx2_dot_kernels();
}

// The rows of one ISA, best first for each weight dtype.
void add_rows(Isa isa, std::vector<LinearKernel>& t) {
  const DotKernels* dk = dot_kernels_of(isa);
  if (dk == nullptr) return;
  const DotKernels& k = *dk;
  constexpr ModeMatch kAny = ModeMatch::kAny, kInt8 = ModeMatch::kInt8, kF32 = ModeMatch::kF32;

  // Packed copies first: where a row fits, its GEMM beats the row kernels.
  const Int8GemmFn int8_gemm = isa == Isa::kAvx512 ? avx512_int8_gemm()
                               : isa == Isa::kAvx2 ? avx2_int8_gemm()
                                                   : nullptr;
  if (int8_gemm != nullptr) {
    const Int8GemmFn amx = isa == Isa::kAvx512 ? amx_int8_gemm() : nullptr;
    t.push_back({.name = "i8 int4-panel gemm",
                 .dtype = DType::I8,
                 .packing = Packing::kInt4Panels,
                 .isa = isa,
                 .mode = kAny,
                 .act = ActFormat::kInt8,
                 .run = run_int8_panels,
                 .fits = fits_int4_panels,
                 .pack = pack_int4_weight,
                 .int8_gemm = int8_gemm,
                 .int8_gemm_amx = amx});
    t.push_back({.name = "i8 int8-panel gemm",
                 .dtype = DType::I8,
                 .packing = Packing::kInt8Panels,
                 .isa = isa,
                 .mode = kAny,
                 .act = ActFormat::kInt8,
                 .run = run_int8_panels,
                 .fits = is_matrix,
                 .pack = pack_int8_weight,
                 .int8_gemm = int8_gemm,
                 .int8_gemm_amx = amx});
  }
  if (isa == Isa::kAvx512) {
    if (Bf16GemmFn bf16 = amx_bf16_gemm())
      t.push_back({.name = "bf16 amx-tile gemm",
                   .dtype = DType::BF16,
                   .packing = Packing::kBf16Tiles,
                   .isa = isa,
                   .mode = kAny,
                   .act = ActFormat::kBf16,
                   .run = run_bf16_tiles,
                   .fits = fits_bf16_tiles,
                   .pack = pack_bf16_tiles,
                   .bf16_gemm = bf16});
  }
  // Float panels: every output one fma chain along K (float_panels.h), on AVX-512 and on AVX2
  // alike; the scalar row kernel computes the same chain.
  const FloatGemmFn fg = isa == Isa::kAvx512 ? avx512_float_gemm()
                         : isa == Isa::kAvx2 ? avx2_float_gemm()
                                             : nullptr;
  if (fg != nullptr)
    for (DType d : {DType::F32, DType::F16, DType::BF16})
      t.push_back({.name = "float-panel gemm",
                   .dtype = d,
                   .packing = Packing::kFloatPanels,
                   .isa = isa,
                   .mode = kAny,
                   .act = ActFormat::kF32,
                   .run = run_float_panels,
                   .fits = fits_float_panels,
                   .pack = pack_float_weight,
                   .float_gemm = fg,
                   .reads_xt = isa == Isa::kAvx512});
  // Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 panels: VNNI (and AMX for batches) on AVX-512, two 8-lane halves
  // per panel on AVX2; every one gives the row kernels' bits (q8_block_dot.h).
  const PackedGemmFn q8 = isa == Isa::kAvx512 ? avx512_packed_gemm()
                          : isa == Isa::kAvx2 ? avx2_packed_gemm()
                                              : nullptr;
  if (q8 != nullptr)
    for (DType d : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0})
      t.push_back({.name = "q8-panel gemm",
                   .dtype = d,
                   .packing = Packing::kQ8Panels,
                   .isa = isa,
                   .mode = kInt8,
                   .act = ActFormat::kPackedQ8,
                   .run = run_q8_panels,
                   .fits = fits_q8_panels,
                   .pack = pack_weight,
                   .q8_gemm = q8,
                   .q8_gemm_amx = isa == Isa::kAvx512 ? amx_packed_gemm() : nullptr});

  // K-quant panels: VNNI on AVX-512, two 8-lane halves per panel on AVX2 (kquant_panels.h; the
  // row kernels' bits).
  const KQuantGemmFn kg = isa == Isa::kAvx512 ? avx512_kquant_gemm()
                          : isa == Isa::kAvx2 ? avx2_kquant_gemm()
                                              : nullptr;
  if (kg != nullptr)
    for (DType d : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
      t.push_back({.name = "k-quant panel gemm",
                   .dtype = d,
                   .packing = Packing::kKQuantPanels,
                   .isa = isa,
                   .mode = kInt8,
                   .act = ActFormat::kQ8_K,
                   .run = run_kquant_panels,
                   .fits = fits_kquant_panels,
                   .pack = pack_kquant_panels,
                   .kquant_gemm = kg});

  // FP8 panels: the row kernels' arithmetic with each k's weights of eight rows one load.
  if (isa != Isa::kScalar)
    if (Fp8PanelsFn panels = avx2_fp8_panels())
      t.push_back({.name = "fp8 panel gemm",
                   .dtype = DType::F8_E4M3,
                   .packing = Packing::kFp8Panels,
                   .isa = isa,
                   .mode = kAny,
                   .act = ActFormat::kF32,
                   .run = run_fp8_panels,
                   .fits = is_matrix,
                   .pack = pack_fp8_panels,
                   .fp8_panels = panels});

  // Row kernels over the stored rows: every dtype has one at every ISA.
  // FP8 and the float row kernels: the AVX2 ones serve AVX-512 CPUs too (one arithmetic).
  const Fp8Kernels& fp8 = isa == Isa::kScalar ? scalar_fp8_kernels() : *avx2_fp8_kernels();
  t.push_back({.name = "fp8 block-scaled dot",
               .dtype = DType::F8_E4M3,
               .packing = Packing::kNone,
               .isa = isa,
               .mode = kAny,
               .act = ActFormat::kF32,
               .run = run_fp8_rows,
               .fp8_rows = fp8.rows,
               .tile_rows = fp8.tile_rows});
  const Int8Kernels& i8 = int8_kernels(isa_name(isa));
  t.push_back({.name = "i8 dot",
               .dtype = DType::I8,
               .packing = Packing::kNone,
               .isa = isa,
               .mode = kAny,
               .act = ActFormat::kInt8,
               .run = run_int8_rows,
               .dot = i8.dot,
               .tile_rows = i8.tile_rows});
  struct Float {
    DType dtype;
    RowsDotFn rows;
  };
  for (const Float& f :
       {Float{DType::F32, k.f32}, Float{DType::F16, k.f16}, Float{DType::BF16, k.bf16}})
    t.push_back({.name = "float dot",
                 .dtype = f.dtype,
                 .packing = Packing::kNone,
                 .isa = isa,
                 .mode = kAny,
                 .act = ActFormat::kF32,
                 .run = run_dot_rows,
                 .rows_dot = f.rows,
                 .tile_rows = k.tile_rows});
  // The quantized formats follow one arithmetic at every ISA (q8_block_dot.h, kquant_dot.h; for
  // the 32-element block formats also the packed GEMMs'): the AVX2 kernels serve AVX-512 CPUs too.
  const Q8BlockKernels& qb =
      isa == Isa::kScalar ? scalar_q8_block_kernels() : *avx2_q8_block_kernels();
  const KQuantKernels& kq = isa == Isa::kScalar ? scalar_kquant_kernels() : *avx2_kquant_kernels();
  struct Quant {
    DType dtype;
    RowsDotFn rows_dot;
    ActFormat act;
    int tile_rows;
    DotFn dequant;
  };
  const Quant quants[] = {
      {DType::Q4_0, qb.q4_0, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::Q4_0>},
      {DType::Q4_1, qb.q4_1, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::Q4_1>},
      {DType::Q5_0, qb.q5_0, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::Q5_0>},
      {DType::Q5_1, qb.q5_1, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::Q5_1>},
      {DType::Q8_0, qb.q8_0, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::Q8_0>},
      {DType::MXFP4, qb.mxfp4, ActFormat::kQ8S, qb.tile_rows, dequant_dot<DType::MXFP4>},
      {DType::Q4_K, kq.q4_k, ActFormat::kQ8_K, kq.tile_rows, dequant_dot<DType::Q4_K>},
      {DType::Q5_K, kq.q5_k, ActFormat::kQ8_K, kq.tile_rows, dequant_dot<DType::Q5_K>},
      {DType::Q6_K, kq.q6_k, ActFormat::kQ8_K, kq.tile_rows, dequant_dot<DType::Q6_K>},
  };
  for (const Quant& q : quants) {
    t.push_back({.name = "quant·q8 dot (one arithmetic)",
                 .dtype = q.dtype,
                 .packing = Packing::kNone,
                 .isa = isa,
                 .mode = kInt8,
                 .act = q.act,
                 .run = run_dot_rows,
                 .rows_dot = q.rows_dot,
                 .tile_rows = q.tile_rows});
    // The dequantizing kernel is portable C++: the same at every ISA.
    t.push_back({.name = "dequant·f32 dot",
                 .dtype = q.dtype,
                 .packing = Packing::kNone,
                 .isa = isa,
                 .mode = kF32,
                 .act = ActFormat::kF32,
                 .run = run_dot_rows,
                 .dot = q.dequant});
  }
}

std::vector<LinearKernel> build_table() {
  std::vector<LinearKernel> t;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar})
    if (int(isa) <= int(best_cpu_isa())) add_rows(isa, t);
  return t;
}

const char* mode_name(ModeMatch m) {
  switch (m) {
    case ModeMatch::kInt8:
      return "int8";
    case ModeMatch::kF32:
      return "f32";
    default:
      return "any";
  }
}

}  // namespace

bool serves(ModeMatch m, QuantCompute mode) {
  return m == ModeMatch::kAny || (m == ModeMatch::kInt8) == (mode == QuantCompute::kInt8);
}

const char* act_format_name(ActFormat f) {
  switch (f) {
    case ActFormat::kQ8_K:
      return "q8_k";
    case ActFormat::kQ8S:
      return "q8_0+sums";
    case ActFormat::kPackedQ8:
      return "q8_0 tiles";
    case ActFormat::kBf16:
      return "bf16 tiles";
    case ActFormat::kInt8:
      return "int8 (weight's scheme)";
    default:
      return "f32";
  }
}

const char* packing_name(Packing p) {
  switch (p) {
    case Packing::kQ8Panels:
      return "q8 panels";
    case Packing::kFloatPanels:
      return "float panels";
    case Packing::kBf16Tiles:
      return "bf16 tiles";
    case Packing::kInt8Panels:
      return "int8 panels";
    case Packing::kInt4Panels:
      return "int4 panels";
    case Packing::kFp8Panels:
      return "fp8 panels";
    case Packing::kKQuantPanels:
      return "k-quant panels";
    default:
      return "rows";
  }
}

std::span<const LinearKernel> linear_kernels() {
  static const std::vector<LinearKernel> table = build_table();
  return table;
}

const LinearKernel* choose_linear_kernel(const Tensor& w, Isa isa, QuantCompute mode, DType act,
                                         bool allow_packing) {
  for (const LinearKernel& r : linear_kernels()) {
    if (r.dtype != w.dtype || r.isa != isa || !serves(r.mode, mode)) continue;
    if (r.panels() && !allow_packing) continue;
    if (r.fits != nullptr && !r.fits(w, act)) continue;
    return &r;
  }
  return nullptr;
}

const LinearKernel* find_linear_kernel(DType dtype, Packing packing, Isa isa, QuantCompute mode) {
  for (const LinearKernel& r : linear_kernels())
    if (r.dtype == dtype && r.packing == packing && r.isa == isa && serves(r.mode, mode)) return &r;
  return nullptr;
}

std::string describe_linear_kernels() {
  std::string s;
  for (const LinearKernel& r : linear_kernels())
    s += fmt::format("\n  {:<7} {:<8} {:<12} mode {:<4} act {:<22} {}", isa_name(r.isa),
                     dtype_name(r.dtype), packing_name(r.packing), mode_name(r.mode),
                     act_format_name(r.act), r.name);
  return s;
}

std::string CpuLinearPlan::describe() const {
  return fmt::format("{} {} ({}, {} activations)", isa_name(kernel_.isa), kernel_.name,
                     packing_name(kernel_.packing), act_format_name(kernel_.act));
}

std::unique_ptr<CpuLinearPlan> make_linear_plan(const Tensor& w, QuantCompute mode, DType act) {
  const LinearKernel* k = choose_linear_kernel(w, selected_isa(), mode, act, true);
  if (k == nullptr) return nullptr;
  return std::make_unique<CpuLinearPlan>(*k, k->pack != nullptr ? k->pack(w) : nullptr);
}

std::unique_ptr<CpuLinearPlan> make_linear_plan(const Tensor& w, Packing packing,
                                                QuantCompute mode) {
  const LinearKernel* k = find_linear_kernel(w.dtype, packing, selected_isa(), mode);
  if (k == nullptr) return nullptr;
  return std::make_unique<CpuLinearPlan>(*k, k->pack != nullptr ? k->pack(w) : nullptr);
}

}  // namespace kestrel::cpu
