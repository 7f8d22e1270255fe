// backend/cpu/matmul_kernels.h — the row-kernel contracts behind linear(), and the float
// weights' row kernels.
//
// A kernel computes the dot products of weight rows with up to kMaxTileRows activation rows,
// decoding each weight block once for all of them. Each output's arithmetic is the same whatever
// the number of rows in the tile, so results do not depend on batch size or thread split.
// Kernels unroll their per-row loops with #pragma GCC unroll: at -O2 GCC keeps the per-row
// accumulator arrays in memory otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kestrel::cpu {

constexpr int kMaxTileRows = 4;

// out[r * out_stride] = dot(w, row r of x) for r < nx (1 <= nx <= kMaxTileRows).
// w: k elements of the kernel's weight dtype. x: activation rows x_stride bytes apart, f32 for
// float weights, else the kernel's int8 activation format.
using DotFn = void (*)(const void* w, const void* x, size_t x_stride, int nx, int64_t k, float* out,
                       int64_t out_stride);

// out[r * out_stride + j] = dot(weight row j, row r of x) for j < nw, r < nx: a DotFn over nw
// weight rows w_stride bytes apart, so a kernel can keep several in registers and reuse each
// activation load. Each output's arithmetic is the same whatever nw, nx and the row's place.
using RowsDotFn = void (*)(const void* w, size_t w_stride, int64_t nw, const void* x,
                           size_t x_stride, int nx, int64_t k, float* out, int64_t out_stride);

// The float weights' row kernels (the quantized formats' are q8_block_dot.h's and kquant_dot.h's):
// every output one fma chain along k, acc = fma(w_i, x_i, acc) from zero in k order — the float
// panels' arithmetic (float_panels.h), so a weight gives the same bits with or without a packed
// copy, on every ISA.
struct DotKernels {
  RowsDotFn f32, f16, bf16;
  int tile_rows;  // activation rows per call
};

// Portable C++; always available.
const DotKernels& scalar_dot_kernels();
// nullptr when this build has no AVX2 code; callers check CPU support themselves. AVX-512 CPUs
// run these too.
const DotKernels* avx2_dot_kernels();

// Turns a kernel with a compile-time tile height, K::run<NX>(w, x, x_stride, k, out,
// out_stride), into a DotFn. K lives in an unnamed namespace of each ISA's file, so every
// instantiation stays local to the file (and its compile flags).
template <typename K>
void dispatch_tile(const void* w, const void* x, size_t x_stride, int nx, int64_t k, float* out,
                   int64_t out_stride) {
  switch (nx) {
    case 1:
      return K::template run<1>(w, x, x_stride, k, out, out_stride);
    case 2:
      return K::template run<2>(w, x, x_stride, k, out, out_stride);
    case 3:
      return K::template run<3>(w, x, x_stride, k, out, out_stride);
    default:
      return K::template run<4>(w, x, x_stride, k, out, out_stride);
  }
}

static_assert(kMaxTileRows == 4, "dispatch_tile handles up to four rows");

// The same for kernels that take up to eight rows (AVX-512 has the registers for them).
constexpr int kMaxWideTileRows = 8;
template <typename K>
void dispatch_tile8(const void* w, const void* x, size_t x_stride, int nx, int64_t k, float* out,
                    int64_t out_stride) {
  switch (nx) {
    case 1:
    case 2:
    case 3:
    case 4:
      return dispatch_tile<K>(w, x, x_stride, nx, k, out, out_stride);
    case 5:
      return K::template run<5>(w, x, x_stride, k, out, out_stride);
    case 6:
      return K::template run<6>(w, x, x_stride, k, out, out_stride);
    case 7:
      return K::template run<7>(w, x, x_stride, k, out, out_stride);
    default:
      return K::template run<8>(w, x, x_stride, k, out, out_stride);
  }
}

}  // namespace kestrel::cpu
