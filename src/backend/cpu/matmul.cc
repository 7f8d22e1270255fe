#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/bf16_tiles.h"
#include "backend/cpu/float_panels.h"
#include "backend/cpu/fp8_matmul.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/packed_matmul.h"
#include "base/status.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // Every AVX2 CPU also has F16C (clang cannot query "f16c"; the build baseline requires it).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2 && avx2_dot_kernels() != nullptr;
    case Isa::kAvx512:
      // The AVX-512 table falls back to nothing, but its file is built with these flags, so
      // every one of them must be present.
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni") && avx512_dot_kernels() != nullptr;
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

// The best ISA at or below `want` that this CPU and build support.
Isa best_isa(Isa want) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (int(isa) <= int(want) && cpu_supports(isa)) return isa;
  }
  return Isa::kScalar;
}

std::optional<Isa> parse_isa(const char* name) {
  if (std::strcmp(name, "auto") == 0 || std::strcmp(name, "avx512") == 0) return Isa::kAvx512;
  if (std::strcmp(name, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(name, "scalar") == 0) return Isa::kScalar;
  return std::nullopt;
}

// The best ISA this CPU runs until set_linear_isa caps it.
std::atomic<Isa>& selected_isa() {
  static std::atomic<Isa> isa{best_isa(Isa::kAvx512)};
  return isa;
}

const DotKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return *avx512_dot_kernels();
    case Isa::kAvx2:
      return *avx2_dot_kernels();
    default:
      return scalar_dot_kernels();
  }
}

// How activations enter a kernel: as f32, or quantized to one of the int8 formats.
enum class ActFormat { kF32, kQ8_0, kQ8_1, kQ8_K, kPacked };
constexpr int kNumQuantFormats = 4;  // the formats after kF32, each with its own buffer

// How the activations enter the kernel for a weight dtype.
struct Plan {
  DotFn fn;
  ActFormat act;
  int tile_rows = kMaxTileRows;  // activation rows per kernel call
  RowsDotFn rows_fn = nullptr;   // where set, used instead of fn, over many weight rows per call
};

Plan plan_for(DType w, const DotKernels& k) {
  switch (w) {
    case DType::F32:
      return {k.f32, ActFormat::kF32, k.float_tile_rows, k.f32_rows};
    case DType::F16:
      return {k.f16, ActFormat::kF32, k.float_tile_rows, k.f16_rows};
    case DType::BF16:
      return {k.bf16, ActFormat::kF32, k.float_tile_rows, k.bf16_rows};
    case DType::Q4_0:
      return {k.q4_0, ActFormat::kQ8_0};
    case DType::Q4_1:
      return {k.q4_1, ActFormat::kQ8_1};
    case DType::Q5_0:
      return {k.q5_0, ActFormat::kQ8_0};
    case DType::Q5_1:
      return {k.q5_1, ActFormat::kQ8_1};
    case DType::Q8_0:
      return {k.q8_0, ActFormat::kQ8_0};
    case DType::Q4_K:
      return {k.q4_k, ActFormat::kQ8_K};
    case DType::Q5_K:
      return {k.q5_k, ActFormat::kQ8_K};
    case DType::Q6_K:
      return {k.q6_k, ActFormat::kQ8_K};
    default:
      return {nullptr, ActFormat::kF32};
  }
}

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

DotFn dequant_dot_for(DType w) {
  switch (w) {
    case DType::Q4_0:
      return dequant_dot<DType::Q4_0>;
    case DType::Q4_1:
      return dequant_dot<DType::Q4_1>;
    case DType::Q5_0:
      return dequant_dot<DType::Q5_0>;
    case DType::Q5_1:
      return dequant_dot<DType::Q5_1>;
    case DType::Q8_0:
      return dequant_dot<DType::Q8_0>;
    case DType::Q4_K:
      return dequant_dot<DType::Q4_K>;
    case DType::Q5_K:
      return dequant_dot<DType::Q5_K>;
    case DType::Q6_K:
      return dequant_dot<DType::Q6_K>;
    default:
      return nullptr;
  }
}

size_t activation_row_bytes(ActFormat act, int64_t k) {
  switch (act) {
    case ActFormat::kQ8_0:
      return dtype_bytes(DType::Q8_0, k);
    case ActFormat::kQ8_1:
      return dtype_bytes(DType::Q8_1, k);
    case ActFormat::kQ8_K:
      return dtype_bytes(DType::Q8_K, k);
    case ActFormat::kPacked: {
      // Code rows in whole cache lines, so that tile loads of a row never straddle two, and an
      // odd number of them: sixteen rows a power-of-two apart would share one L1 set.
      const size_t lines = (size_t(k) + kCacheLineBytes - 1) / kCacheLineBytes;
      return (lines | 1) * kCacheLineBytes;
    }
    default:
      return size_t(k) * sizeof(float);
  }
}

void quantize_activation_row(ActFormat act, const float* x, void* dst, int64_t k) {
  switch (act) {
    case ActFormat::kQ8_0:
      return quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), k);
    case ActFormat::kQ8_1:
      return quantize_row_q8_1(x, static_cast<BlockQ8_1*>(dst), k);
    default:
      return quantize_row_q8_k(x, static_cast<BlockQ8_K*>(dst), k);
  }
}

// Packed GEMMs run for int8 compute under the AVX-512 ISA when w has a packed copy: AMX from
// kAmxMinRows activation rows where the CPU has it and it is not switched off, VNNI otherwise.
// Both give the same bits (packed_matmul.h), so the choice is only about speed.
constexpr int64_t kAmxMinRows = 8;

// The float panel GEMM for a float weight with a packed copy, under the AVX-512 ISA.
FloatGemmFn float_gemm_for(const Tensor& w, Isa isa) {
  if (w.packed == nullptr || w.packed_kind != PackedKind::kPanels || isa != Isa::kAvx512 ||
      !float_packable(w))
    return nullptr;
  return avx512_float_gemm();
}

// The AMX bf16 GEMM for a weight packed as bf16 tiles, under the AVX-512 ISA.
Bf16GemmFn bf16_gemm_for(const Tensor& w, Isa isa) {
  if (w.packed == nullptr || w.packed_kind != PackedKind::kBf16Tiles || isa != Isa::kAvx512)
    return nullptr;
  return amx_bf16_gemm();
}

std::atomic<bool>& amx_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

PackedGemmFn packed_gemm_for(const Tensor& w, Isa isa, QuantCompute mode, int64_t m) {
  if (w.packed == nullptr || isa != Isa::kAvx512 || mode != QuantCompute::kInt8 || !packable(w))
    return nullptr;
  if (m >= kAmxMinRows && amx_enabled().load())
    if (PackedGemmFn amx = amx_packed_gemm()) return amx;
  return avx512_packed_gemm();
}

// The int8 panel GEMM for an I8 weight with a packed copy: under AVX-512, AMX from kAmxMinRows
// activation rows (as packed_gemm_for) or VNNI; under AVX2 its int16 GEMM. All give the row
// kernels' bits.
Int8GemmFn int8_gemm_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512_int8_gemm();
    case Isa::kAvx2:
      return avx2_int8_gemm();
    default:
      return nullptr;
  }
}

Int8GemmFn int8_gemm_for(const Tensor& w, Isa isa, int64_t m) {
  if (w.packed == nullptr) return nullptr;
  if (isa == Isa::kAvx512 && m >= kAmxMinRows && amx_enabled().load())
    if (Int8GemmFn amx = amx_int8_gemm()) return amx;
  return int8_gemm_of(isa);
}

// A thread's share must be at least this many multiply-adds, so small matrices stay on one
// thread instead of paying for a wake-up.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 16;
// Weight rows are walked in groups of about this many bytes when several activation tiles
// revisit them, so a group stays in L2 between tiles.
constexpr int64_t kWeightGroupBytes = int64_t(256) << 10;
// Bytes of activation rows one kernel call may read: about half of a 48 KiB L1.
constexpr int64_t kActivationTileBytes = int64_t(24) << 10;
// Activation rows are quantized in parallel once a thread gets at least this many elements.
constexpr int64_t kMinQuantElemsPerThread = int64_t(1) << 14;

}  // namespace

const char* linear_isa() {
  return isa_name(selected_isa().load());
}

bool packed_weights_supported() {
  return selected_isa().load() == Isa::kAvx512 && avx512_packed_gemm() != nullptr;
}

Int8GemmFn selected_int8_gemm() {
  return int8_gemm_of(selected_isa().load());
}

bool packed_amx_active() {
  return packed_weights_supported() && amx_enabled().load() && amx_packed_gemm() != nullptr;
}

void set_packed_amx(bool on) {
  amx_enabled().store(on);
}

bool avx512_selected() {
  return selected_isa().load() == Isa::kAvx512;
}

void set_linear_isa(const char* isa) {
  const std::optional<Isa> want = parse_isa(isa);
  KCHECK(want.has_value(), "set_linear_isa: unknown ISA '{}' (auto, avx512, avx2, scalar)", isa);
  selected_isa().store(best_isa(*want));
}

void linear(const Tensor& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            QuantCompute mode, ThreadScratch* thread_scratch) {
  const LinearJob job{&w, y};
  linear_group(std::span<const LinearJob>(&job, 1), x, m, pool, mode, thread_scratch);
}

void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m, ThreadPool& pool,
                  QuantCompute mode, ThreadScratch* thread_scratch) {
  KCHECK(!jobs.empty(), "linear_group: no weights");
  const int64_t k = jobs[0].w->cols();
  const Isa isa = selected_isa().load();
  const DotKernels& kernels = kernels_for(isa);

  // Per job: its plan and where its weights and activations are. Activations are quantized once
  // per int8 format the group needs (usually one), into buffers kept per calling thread so
  // steady-state calls do not allocate.
  struct Prepared {
    Plan plan;
    const uint8_t* w;
    size_t row_bytes;
    const uint8_t* x;
    size_t x_stride;
    int64_t n;
    PackedGemmFn gemm = nullptr;  // where set (or fgemm), a packed job: its units are panels
    FloatGemmFn fgemm = nullptr;
    Bf16GemmFn bgemm = nullptr;
    Int8GemmFn igemm = nullptr;  // a packed I8 job
    int64_t units = 0;
  };
  constexpr int kMaxJobs = 8;
  KCHECK(jobs.size() <= kMaxJobs, "linear_group: at most {} weights", kMaxJobs);
  Prepared prep[kMaxJobs];
  Fp8Weight fp8[kMaxJobs];   // codes set: an FP8 job, whose kernel reads its rows as Fp8Row
  bool int8[kMaxJobs] = {};  // an I8 job: its kernel reads its rows as Int8Row
  // I8 jobs' activations, quantized per job (each weight has its own scheme).
  thread_local std::vector<uint8_t> int8_scratch[kMaxJobs];
  thread_local std::vector<uint8_t> scratch[kNumQuantFormats];
  bool quantized[kNumQuantFormats] = {};
  PackedActivations packed_x;
  const uint16_t* bf16_x = nullptr;  // bf16 rows for the AMX bf16 jobs, when there are any
  size_t bf16_stride = 0;
  int64_t total_units = 0;
  bool any_packed = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Tensor& w = *jobs[i].w;
    const DTypeInfo& info = dtype_info(w.dtype);
    KCHECK(w.cols() == k, "linear_group: K differs ({} vs {})", w.cols(), k);
    KCHECK(k % info.block_elems == 0, "linear: K = {} is not a multiple of the {} block ({})", k,
           info.name, info.block_elems);
    Prepared& p = prep[i];
    p = {plan_for(w.dtype, kernels),          static_cast<const uint8_t*>(w.data), w.row_bytes(),
         reinterpret_cast<const uint8_t*>(x), size_t(k) * sizeof(float),           w.rows()};
    if (mode == QuantCompute::kF32 && info.quantized)
      p.plan = {dequant_dot_for(w.dtype), ActFormat::kF32};
    if (PackedGemmFn gemm = packed_gemm_for(w, isa, mode, m)) {
      p.plan = {nullptr, ActFormat::kPacked};
      p.gemm = gemm;
      p.w = static_cast<const uint8_t*>(w.packed);
      any_packed = true;
    }
    if (Bf16GemmFn bgemm = bf16_gemm_for(w, isa)) {
      p.bgemm = bgemm;
      p.w = static_cast<const uint8_t*>(w.packed);
      any_packed = true;
    }
    if (FloatGemmFn fgemm = float_gemm_for(w, isa)) {
      p.fgemm = fgemm;
      p.w = static_cast<const uint8_t*>(w.packed);
      any_packed = true;
    }
    if (w.dtype == DType::F8_E4M3) {
      const Fp8Kernels& fk = fp8_kernels(isa_name(isa));
      p.plan = {fk.dot, ActFormat::kF32, fk.tile_rows};
      fp8[i] = fp8_weight(w);
    }
    if (w.dtype == DType::I8) {
      // The sums of q + 128 codes must fit int32 (int8_matmul_avx512.cc).
      KCHECK(k <= (int64_t(1) << 16), "linear: an int8 weight of {} columns", k);
      const Int8Kernels& ik = int8_kernels(isa_name(isa));
      p.plan = {ik.dot, ActFormat::kF32, ik.tile_rows};
      int8[i] = true;
      if (Int8GemmFn igemm = int8_gemm_for(w, isa, m)) {
        p.igemm = igemm;
        p.w = static_cast<const uint8_t*>(w.packed);
        any_packed = true;
      }
      p.x_stride = int8_activation_row_bytes(k);
      // Whole sixteen-row tiles for the AMX GEMM, which reads (and never stores) rows past m.
      uint8_t* q = cache_aligned(
          int8_scratch[i], size_t(int8_gemm_activation_rows(std::max<int64_t>(m, 0))) * p.x_stride);
      p.x = q;
      const size_t stride = p.x_stride;
      pool.parallel_for(m, kMinQuantElemsPerThread / std::max<int64_t>(k, 1) + 1,
                        [&](int64_t r0, int64_t r1) {
                          for (int64_t r = r0; r < r1; ++r)
                            quantize_int8_row(w, x + r * k, k, q + r * stride);
                        });
    }
    const bool panels =
        p.gemm != nullptr || p.fgemm != nullptr || p.bgemm != nullptr || p.igemm != nullptr;
    KCHECK(p.plan.fn != nullptr || p.plan.rows_fn != nullptr || panels,
           "linear: unsupported weight dtype {}", info.name);
    p.units = panels ? packed_panels(p.n) : p.n;
    total_units += p.units;
    if (p.plan.act == ActFormat::kF32 || m <= 0) continue;
    const ActFormat act = p.plan.act;
    const int f = int(act) - 1;
    p.x_stride = activation_row_bytes(act, k);
    std::vector<uint8_t>& buf = scratch[f];
    // Packed activations: code rows padded to whole row tiles, then the scale area.
    const int64_t rows = act == ActFormat::kPacked ? packed_activation_rows(m) : m;
    const size_t code_bytes = size_t(rows) * p.x_stride;
    const size_t bytes =
        code_bytes + (act == ActFormat::kPacked ? packed_activation_scale_bytes(m, k) : 0);
    // Rows start on a cache line.
    uint8_t* q = cache_aligned(buf, bytes);
    p.x = q;
    if (quantized[f]) continue;
    quantized[f] = true;
    const size_t stride = p.x_stride;
    const int64_t grain = kMinQuantElemsPerThread / std::max<int64_t>(k, 1) + 1;
    if (act != ActFormat::kPacked) {
      pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          quantize_activation_row(act, x + r * k, q + r * stride, k);
      });
      continue;
    }
    auto* scales = reinterpret_cast<float*>(q + code_bytes);
    packed_x = {reinterpret_cast<const int8_t*>(q), stride, scales, k / QK};
    if (rows > m) {
      // The tile unit reads whole row tiles: padding rows are zero codes with zero scales.
      std::memset(q + size_t(m) * stride, 0, size_t(rows - m) * stride);
      const size_t tile_scale_bytes = packed_activation_scale_bytes(kPanelRows, k);
      std::memset(reinterpret_cast<uint8_t*>(scales) + packed_activation_scale_bytes(m, k) -
                      tile_scale_bytes,
                  0, tile_scale_bytes);
    }
    pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        quantize_row_packed(x + r * k, reinterpret_cast<int8_t*>(q + r * stride), scales, r, k);
    });
  }
  if (m <= 0 || total_units <= 0) return;
  const float* xt = nullptr;  // x transposed for the float panel jobs of a small batch
  if (m <= kFloatSinglePassRows &&
      std::any_of(prep, prep + jobs.size(), [](const Prepared& p) { return p.fgemm != nullptr; })) {
    thread_local std::vector<float> xt_buf;
    xt_buf.resize(size_t(m * k));
    transpose_activations(x, m, k, xt_buf.data());
    xt = xt_buf.data();
  }
  if (std::any_of(prep, prep + jobs.size(), [](const Prepared& p) { return p.bgemm != nullptr; })) {
    // Rows padded to whole row tiles with zeros: the tile unit reads sixteen at a time.
    thread_local std::vector<uint16_t> bf16_buf;
    bf16_stride = bf16_activation_stride(k);
    const int64_t rows = packed_activation_rows(m);
    uint16_t* q = cache_aligned(bf16_buf, size_t(rows) * bf16_stride / sizeof(uint16_t));
    std::memset(reinterpret_cast<uint8_t*>(q) + size_t(m) * bf16_stride, 0,
                size_t(rows - m) * bf16_stride);
    pool.parallel_for(
        m, kMinQuantElemsPerThread / std::max<int64_t>(k, 1) + 1,
        [&](int64_t r0, int64_t r1) { round_rows_to_bf16(x, k, q, bf16_stride, r0, r1); });
    bf16_x = q;
  }

  // Output rows (panels, for packed jobs) of all jobs form one range split over threads; each
  // output is computed whole by one kernel call, so neither the split nor the activation tile it
  // lands in changes its summation order.
  const int64_t row_grain = kMinMacsPerThread / std::max<int64_t>(1, m * k) + 1;
  const int64_t grain = any_packed ? row_grain / kPanelRows + 1 : row_grain;
  ThreadScratch own(thread_scratch != nullptr ? 0 : pool.size());
  ThreadScratch& arenas = thread_scratch != nullptr ? *thread_scratch : own;
  pool.parallel_for(total_units, grain, [&](int64_t r0, int64_t r1, int thread) {
    int64_t base = 0;
    for (size_t i = 0; i < jobs.size() && base < r1; base += prep[i].units, ++i) {
      const Prepared& p = prep[i];
      const int64_t n0 = std::max<int64_t>(r0 - base, 0),
                    n1 = std::min<int64_t>(r1 - base, p.units);
      if (n0 >= n1) continue;
      float* y = jobs[i].y;
      if (p.gemm != nullptr) {
        const PackedGemm g{jobs[i].w->dtype, p.w, p.n, k, packed_x, m, y, p.n, &arenas[thread]};
        p.gemm(g, n0, n1);
        continue;
      }
      if (p.bgemm != nullptr) {
        const Bf16Gemm g{p.w, p.n, k, bf16_x, bf16_stride, m, y, p.n};
        p.bgemm(g, n0, n1);
        continue;
      }
      if (p.fgemm != nullptr) {
        const FloatGemm g{jobs[i].w->dtype, p.w, p.n, k, x, m, y, p.n, xt};
        p.fgemm(g, n0, n1);
        continue;
      }
      if (p.igemm != nullptr) {
        const Tensor& w = *jobs[i].w;
        const Int8Gemm g{p.w,
                         p.n,
                         k,
                         p.x,
                         p.x_stride,
                         m,
                         y,
                         p.n,
                         w.block_scale,
                         w.row_bias,
                         w.packed_kind == PackedKind::kInt4Panels,
                         &arenas[thread]};
        p.igemm(g, n0, n1);
        continue;
      }
      const uint8_t* wb = p.w;
      // Activation tiles stay within half of L1, next to the weight row streaming past them.
      // Float kernels keep at least four rows: they convert each weight vector once per call,
      // and at large K their f32 rows would otherwise shrink the tile to one row, converting
      // every weight once per activation row (four rows from L2 beat that).
      const int min_tile = p.plan.act == ActFormat::kF32 ? std::min(4, p.plan.tile_rows) : 1;
      const int tile = int(std::clamp<int64_t>(kActivationTileBytes / int64_t(p.x_stride), min_tile,
                                               p.plan.tile_rows));
      // With several activation tiles, weight rows go in groups that stay in L2 while every
      // tile passes over them; with one tile each weight row is streamed exactly once.
      const int64_t group =
          m <= tile ? p.n
                    : std::max<int64_t>(
                          1, kWeightGroupBytes / std::max<int64_t>(1, int64_t(p.row_bytes)));
      for (int64_t g0 = n0; g0 < n1; g0 += group) {
        const int64_t g1 = std::min(n1, g0 + group);
        for (int64_t m0 = 0; m0 < m; m0 += tile) {
          const int nx = int(std::min<int64_t>(tile, m - m0));
          const uint8_t* xt = p.x + size_t(m0) * p.x_stride;
          if (p.plan.rows_fn != nullptr) {
            p.plan.rows_fn(wb + size_t(g0) * p.row_bytes, p.row_bytes, g1 - g0, xt, p.x_stride, nx,
                           k, y + m0 * p.n + g0, p.n);
            continue;
          }
          for (int64_t j = g0; j < g1; ++j) {
            float* out = y + m0 * p.n + j;
            if (fp8[i].codes != nullptr) {
              const Fp8Row row = fp8[i].row(j);
              p.plan.fn(&row, xt, p.x_stride, nx, k, out, p.n);
            } else if (int8[i]) {
              const Int8Row row = int8_row(*jobs[i].w, j);
              p.plan.fn(&row, xt, p.x_stride, nx, k, out, p.n);
            } else {
              p.plan.fn(wb + size_t(j) * p.row_bytes, xt, p.x_stride, nx, k, out, p.n);
            }
          }
        }
      }
    }
  });
}

}  // namespace kestrel::cpu
