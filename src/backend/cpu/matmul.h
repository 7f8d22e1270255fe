// backend/cpu/matmul.h — y = x · Wᵀ for weights of any supported dtype (the Linear kernel).
// Quantized weights are used in place: each block is decoded inside the dot product.
#pragma once

#include <cstdint>

#include <span>
#include "backend/ops.h"

#include "backend/cpu/thread_scratch.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

// W: [N, K] (PyTorch [out, in]) of dtype F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K, or
// F8_E4M3 with its block scales (Tensor::block_scale; always computed in f32, fp8_matmul.h).
// x: [M, K] f32 row-major; y: [M, N] f32 row-major (overwritten). K must be a multiple of the
// weight's block size. Work is split over `pool`; `thread_scratch`: its arenas
// (thread_scratch.h), for the packed GEMMs; null: buffers of this call's own.
void linear(const Tensor& w, const float* x, int64_t m, float* y, ThreadPool& pool,
            QuantCompute mode = QuantCompute::kInt8, ThreadScratch* thread_scratch = nullptr);

// Several weights applied to the same activations (e.g. q/k/v or gate/up projections), as one
// parallel region: activations are quantized once per int8 format and the output rows of all
// weights are split over the threads together. Each weight must have the same K; job i writes
// [M, N_i] to its own y. At most 8 jobs.
void linear_group(std::span<const LinearJob> jobs, const float* x, int64_t m, ThreadPool& pool,
                  QuantCompute mode = QuantCompute::kInt8, ThreadScratch* thread_scratch = nullptr);

// Whether the packed-weight kernels (packed_matmul.h) run now: this CPU and build have them and
// the AVX-512 kernels are selected. A weight with a packed copy (Tensor::packed) is then read
// from it.
bool packed_weights_supported();

// Which SIMD implementation linear() uses on this CPU ("avx512", "avx2", "scalar"): the best the
// CPU runs, or at most the one set_linear_isa named (cap_cpu_isa, backend/backend.h).
const char* linear_isa();
// linear_isa() is "avx512": the other per-ISA kernels (attention, round_to, silu_mul) follow it.
bool avx512_selected();

// Whether batches over packed int8 weights run on AMX (packed_weights_supported, this CPU and
// kernel have AMX, and set_packed_amx(false) did not switch it off). AMX
// and VNNI give the same bits; the switch exists to compare them. The CPU backend also packs BF16
// weights as AMX bf16 tiles (bf16_tiles.h) only while this holds.
bool packed_amx_active();
void set_packed_amx(bool on);

// Forces an ISA for tests (falls back if the CPU lacks it); "auto" restores detection.
void set_linear_isa(const char* isa);

}  // namespace kestrel::cpu
