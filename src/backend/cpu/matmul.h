// backend/cpu/matmul.h — y = x · Wᵀ for weights of any supported dtype (the Linear kernel).
// Each weight runs the kernel its plan names (linear_plan.h); quantized weights are used in
// place, each block decoded inside the dot product.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/thread_scratch.h"
#include "backend/linear_weight.h"
#include "backend/ops.h"
#include "base/thread_pool.h"

namespace kestrel::cpu {

// W: [N, K] (PyTorch [out, in]) of dtype F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K,
// F8_E4M3 with its block scales (always computed in f32, fp8_matmul.h) or I8 (int8_matmul.h).
// A weight without a plan runs the row kernels of the selected ISA over its stored rows. w.bias
// is not added here (the backend adds it).
// x: [M, K] f32 row-major; y: [M, N] f32 row-major (overwritten). K must be a multiple of the
// weight's block size. Work is split over `pool`; `thread_scratch`: its arenas
// (thread_scratch.h), for the packed GEMMs; null: buffers of this call's own.
void linear(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            QuantCompute mode = QuantCompute::kInt8, ThreadScratch* thread_scratch = nullptr);

// Several weights applied to the same activations (e.g. q/k/v or gate/up projections), as one
// parallel region: activations are quantized once per int8 format and the output rows of all
// weights are split over the threads together. Each weight must have the same K; job i writes
// [M, N_i] to its own y. At most 8 jobs.
void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m, ThreadPool& pool,
                  QuantCompute mode = QuantCompute::kInt8, ThreadScratch* thread_scratch = nullptr);

// Whether the packed-weight GEMMs (packed_matmul.h) run now: the selected ISA is AVX2 or
// AVX-512 and this build has its kernel.
bool packed_weights_supported();
// Whether batches over packed int8 weights run on AMX (the AVX-512 kernels are selected, this
// CPU and kernel have AMX, and set_packed_amx(false) did not switch it off).
bool packed_amx_active();

}  // namespace kestrel::cpu
