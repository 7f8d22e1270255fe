#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/aligned_scratch.h"
#include "backend/cpu/linear_plan.h"
#include "backend/cpu/q8_block_dot.h"
#include "base/status.h"
#include "tensor/quant_formats.h"

namespace kestrel::cpu {
namespace {

constexpr int kMaxJobs = 8;

// Batches of at least this many activation rows run packed GEMMs on AMX where the CPU has it and
// it is allowed; AMX and VNNI give the same bits (packed_matmul.h), so the choice is only speed.
constexpr int64_t kAmxMinRows = 8;
// A thread's share must be at least this many multiply-adds, so small matrices stay on one
// thread instead of paying for a wake-up.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 16;
// Activation rows are quantized in parallel once a thread gets at least this many elements.
constexpr int64_t kMinQuantElemsPerThread = int64_t(1) << 14;

// The calling thread's activation buffers (its arena, thread_scratch.h): grow-only, so
// steady-state calls do not allocate.
struct LinearBuffers {
  std::vector<uint8_t> q8[3];  // ActFormat kQ8_K, kQ8S, kPackedQ8
  std::vector<uint8_t> int8[kMaxJobs];
  std::vector<float> xt;
  std::vector<uint16_t> bf16;
};

// The kernel a call runs for w at `isa` under `mode`, and the packed copy it reads: the plan's,
// or for a weight without one (or planned at another ISA, with no row there for its copy) the
// first row over the stored rows.
struct Chosen {
  const LinearKernel* kernel;
  const uint8_t* packed;
};
Chosen kernel_for(const LinearWeight& w, Isa isa, QuantCompute mode) {
  if (w.plan != nullptr) {
    const auto* plan = dynamic_cast<const CpuLinearPlan*>(w.plan);
    KCHECK(plan != nullptr, "linear: a weight planned by another backend ({})", w.plan->describe());
    const LinearKernel& pk = plan->kernel();
    if (pk.isa == isa && serves(pk.mode, mode)) return {&pk, plan->packed()};
    if (const LinearKernel* k = find_linear_kernel(w.w.dtype, pk.packing, isa, mode))
      return {k, plan->packed()};
  }
  return {choose_linear_kernel(w.w, isa, mode, DType::F32, false), nullptr};
}

size_t activation_row_bytes(ActFormat act, int64_t k) {
  switch (act) {
    case ActFormat::kQ8_K:
      return dtype_bytes(DType::Q8_K, k);
    case ActFormat::kQ8S:
      return size_t(k / QK) * sizeof(BlockQ8S);
    case ActFormat::kPackedQ8: {
      // Code rows in whole cache lines, so that tile loads of a row never straddle two, and an
      // odd number of them: sixteen rows a power-of-two apart would share one L1 set.
      const size_t lines = (size_t(k) + kCacheLineBytes - 1) / kCacheLineBytes;
      return (lines | 1) * kCacheLineBytes;
    }
    case ActFormat::kBf16:
      return bf16_activation_stride(k);
    case ActFormat::kInt8:
      return int8_activation_row_bytes(k);
    default:
      return size_t(k) * sizeof(float);
  }
}

void quantize_activation_row(ActFormat act, const float* x, void* dst, int64_t k) {
  switch (act) {
    case ActFormat::kQ8S:
      return quantize_row_q8s(x, static_cast<BlockQ8S*>(dst), k);
    default:
      return quantize_row_q8_k(x, static_cast<BlockQ8_K*>(dst), k);
  }
}

// Activations in one format, made once per call for every job that reads them.
struct Prepared {
  const uint8_t* x = nullptr;
  size_t stride = 0;
  PackedActivations packed;
};

// x's m rows in format `act` (other than kF32 and kInt8) in `buf`.
Prepared prepare_activations(ActFormat act, const float* x, int64_t m, int64_t k,
                             LinearBuffers& bufs, ThreadPool& pool) {
  const int64_t grain = kMinQuantElemsPerThread / std::max<int64_t>(k, 1) + 1;
  Prepared p;
  p.stride = activation_row_bytes(act, k);
  if (act == ActFormat::kBf16) {
    // Rows padded to whole row tiles with zeros: the tile unit reads sixteen at a time.
    const int64_t rows = packed_activation_rows(m);
    uint16_t* q = cache_aligned(bufs.bf16, size_t(rows) * p.stride / sizeof(uint16_t));
    std::memset(reinterpret_cast<uint8_t*>(q) + size_t(m) * p.stride, 0,
                size_t(rows - m) * p.stride);
    pool.parallel_for(
        m, grain, [&](int64_t r0, int64_t r1) { round_rows_to_bf16(x, k, q, p.stride, r0, r1); });
    p.x = reinterpret_cast<const uint8_t*>(q);
    return p;
  }
  const bool tiles = act == ActFormat::kPackedQ8;
  // Packed activations: code rows padded to whole row tiles, then the scale area.
  const int64_t rows = tiles ? packed_activation_rows(m) : m;
  const size_t code_bytes = size_t(rows) * p.stride;
  const size_t bytes = code_bytes + (tiles ? packed_activation_scale_bytes(m, k) : 0);
  uint8_t* q = cache_aligned(bufs.q8[int(act) - int(ActFormat::kQ8_K)], bytes);
  p.x = q;
  const size_t stride = p.stride;
  if (!tiles) {
    pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) quantize_activation_row(act, x + r * k, q + r * stride, k);
    });
    return p;
  }
  auto* scales = reinterpret_cast<float*>(q + code_bytes);
  p.packed = {reinterpret_cast<const int8_t*>(q), stride, scales, k / QK};
  if (rows > m) {
    // The tile unit reads whole row tiles: padding rows are zero codes with zero scales.
    std::memset(q + size_t(m) * stride, 0, size_t(rows - m) * stride);
    const size_t tile_scale_bytes = packed_activation_scale_bytes(kPanelRows, k);
    std::memset(
        reinterpret_cast<uint8_t*>(scales) + packed_activation_scale_bytes(m, k) - tile_scale_bytes,
        0, tile_scale_bytes);
  }
  pool.parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      quantize_row_packed(x + r * k, reinterpret_cast<int8_t*>(q + r * stride), scales, r, k);
  });
  return p;
}

// x's rows in an I8 weight's own activation scheme, in `buf`.
Prepared prepare_int8_activations(const WeightScales& s, const float* x, int64_t m, int64_t k,
                                  std::vector<uint8_t>& buf, ThreadPool& pool) {
  // The sums of q + 128 codes must fit int32 (int8_matmul_avx512.cc).
  KCHECK(k <= (int64_t(1) << 16), "linear: an int8 weight of {} columns", k);
  Prepared p;
  p.stride = int8_activation_row_bytes(k);
  // Whole sixteen-row tiles for the AMX GEMM, which reads (and never stores) rows past m.
  uint8_t* q =
      cache_aligned(buf, size_t(int8_gemm_activation_rows(std::max<int64_t>(m, 0))) * p.stride);
  p.x = q;
  const size_t stride = p.stride;
  pool.parallel_for(m, kMinQuantElemsPerThread / std::max<int64_t>(k, 1) + 1,
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r)
                        quantize_int8_row(s, x + r * k, k, q + r * stride);
                    });
  return p;
}

}  // namespace

bool packed_weights_supported() {
  switch (selected_isa()) {
    case Isa::kAvx512:
      return avx512_packed_gemm() != nullptr;
    case Isa::kAvx2:
      return avx2_packed_gemm() != nullptr;
    default:
      return false;
  }
}

Int8GemmFn selected_int8_gemm() {
  switch (selected_isa()) {
    case Isa::kAvx512:
      return avx512_int8_gemm();
    case Isa::kAvx2:
      return avx2_int8_gemm();
    default:
      return nullptr;
  }
}

bool packed_amx_active() {
  return selected_isa() == Isa::kAvx512 && packed_weights_supported() && amx_enabled() &&
         amx_packed_gemm() != nullptr;
}

void linear(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            QuantCompute mode, ThreadScratch* thread_scratch) {
  const LinearJob job{&w, y};
  linear_group(std::span<const LinearJob>(&job, 1), x, m, pool, mode, thread_scratch);
}

void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m, ThreadPool& pool,
                  QuantCompute mode, ThreadScratch* thread_scratch) {
  KCHECK(!jobs.empty(), "linear_group: no weights");
  KCHECK(jobs.size() <= kMaxJobs, "linear_group: at most {} weights", kMaxJobs);
  const int64_t k = jobs[0].w->cols();
  const Isa isa = selected_isa();
  ThreadScratch own(thread_scratch != nullptr ? 0 : pool.size());
  ThreadScratch& arenas = thread_scratch != nullptr ? *thread_scratch : own;
  LinearBuffers& bufs = arenas[0].get<LinearBuffers>();

  // Per job: its kernel and its call. Activations are prepared once per format the group needs
  // (usually one); I8 weights' per job, each weight having its own scheme.
  const LinearKernel* kern[kMaxJobs];
  LinearCall call[kMaxJobs];
  Prepared formats[int(ActFormat::kInt8)];
  bool made[int(ActFormat::kInt8)] = {};
  const float* xt = nullptr;
  int64_t total_units = 0;
  bool any_panels = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LinearWeight& w = *jobs[i].w;
    const DTypeInfo& info = dtype_info(w.w.dtype);
    KCHECK(w.cols() == k, "linear_group: K differs ({} vs {})", w.cols(), k);
    KCHECK(k % info.block_elems == 0, "linear: K = {} is not a multiple of the {} block ({})", k,
           info.name, info.block_elems);
    const Chosen chosen = kernel_for(w, isa, mode);
    KCHECK(chosen.kernel != nullptr, "linear: unsupported weight dtype {}", info.name);
    const LinearKernel& kr = *chosen.kernel;
    kern[i] = &kr;
    LinearCall& c = call[i];
    c = {&w,
         chosen.packed != nullptr ? chosen.packed : static_cast<const uint8_t*>(w.w.data),
         w.w.row_bytes(),
         w.rows(),
         k,
         m,
         reinterpret_cast<const uint8_t*>(x),
         size_t(k) * sizeof(float),
         {},
         nullptr,
         jobs[i].y,
         m >= kAmxMinRows && amx_enabled()};
    total_units += kr.units(c.n);
    any_panels = any_panels || kr.panels();
    if (m <= 0) continue;
    if (kr.act == ActFormat::kInt8) {
      const Prepared p = prepare_int8_activations(w.scales, x, m, k, bufs.int8[i], pool);
      c.x = p.x;
      c.x_stride = p.stride;
    } else if (kr.act != ActFormat::kF32) {
      const int f = int(kr.act);
      if (!made[f]) formats[f] = prepare_activations(kr.act, x, m, k, bufs, pool);
      made[f] = true;
      c.x = formats[f].x;
      c.x_stride = formats[f].stride;
      c.packed_x = formats[f].packed;
    } else if (kr.reads_xt && m <= kFloatSinglePassRows) {
      // The float panels of a small batch read x transposed (once for all of them).
      if (xt == nullptr) {
        if (bufs.xt.size() < size_t(m * k)) bufs.xt.resize(size_t(m * k));
        transpose_activations(x, m, k, bufs.xt.data());
        xt = bufs.xt.data();
      }
      c.xt = xt;
    }
  }
  if (m <= 0 || total_units <= 0) return;

  // Output rows (panels, for packed jobs) of all jobs form one range split over threads; each
  // output is computed whole by one kernel call, so neither the split nor the activation tile it
  // lands in changes its summation order.
  const int64_t row_grain = kMinMacsPerThread / std::max<int64_t>(1, m * k) + 1;
  const int64_t grain = any_panels ? row_grain / kPanelRows + 1 : row_grain;
  pool.parallel_for(total_units, grain, [&](int64_t r0, int64_t r1, int thread) {
    int64_t base = 0;
    for (size_t i = 0; i < jobs.size() && base < r1; ++i) {
      const int64_t units = kern[i]->units(call[i].n);
      const int64_t u0 = std::max<int64_t>(r0 - base, 0), u1 = std::min<int64_t>(r1 - base, units);
      base += units;
      if (u0 < u1) kern[i]->run(*kern[i], call[i], arenas[thread], u0, u1);
    }
  });
}

}  // namespace kestrel::cpu
