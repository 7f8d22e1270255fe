// backend/cpu/matmul_kernels.h — the per-ISA dot-product kernels behind linear().
//
// A kernel computes the dot products of one weight row with up to kMaxTileRows activation rows,
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
// float weights, else the matching int8 format (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1,
// Q8_K for the K-quants).
using DotFn = void (*)(const void* w, const void* x, size_t x_stride, int nx, int64_t k, float* out,
                       int64_t out_stride);

// out[r * out_stride + j] = dot(weight row j, row r of x) for j < nw, r < nx: a DotFn over nw
// weight rows w_stride bytes apart, so a kernel can keep several in registers and reuse each
// activation load. Each output's arithmetic is the same whatever nw, nx and the row's place.
using RowsDotFn = void (*)(const void* w, size_t w_stride, int64_t nw, const void* x,
                           size_t x_stride, int nx, int64_t k, float* out, int64_t out_stride);

struct DotKernels {
  // Q4_0, Q4_1 and Q8_0 are q8_block_dot.h's: one arithmetic with the packed GEMMs.
  DotFn f32, f16, bf16, q5_0, q5_1, q4_k, q5_k, q6_k;
  // Where set, the float weights' kernels over several weight rows (same results as f32/f16/bf16).
  RowsDotFn f32_rows = nullptr, f16_rows = nullptr, bf16_rows = nullptr;
  int float_tile_rows = kMaxTileRows;  // rows the f32/f16/bf16 kernels take per call
};

// Portable C++; always available.
const DotKernels& scalar_dot_kernels();
// nullptr when this build has no such code; callers check CPU support themselves.
const DotKernels* avx2_dot_kernels();
const DotKernels* avx512_dot_kernels();

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

// A RowsDotFn from a kernel with K::rows<NX>(w, w_stride, nw, x, x_stride, k, out, out_stride)
// for NX = 1..8 (local to its file, as for dispatch_tile).
template <typename K>
void dispatch_rows8(const void* w, size_t ws, int64_t nw, const void* x, size_t xs, int nx,
                    int64_t k, float* out, int64_t os) {
  using Rows =
      void (*)(const void*, size_t, int64_t, const void*, size_t, int64_t, float*, int64_t);
  static constexpr Rows kRows[kMaxWideTileRows] = {
      K::template rows<1>, K::template rows<2>, K::template rows<3>, K::template rows<4>,
      K::template rows<5>, K::template rows<6>, K::template rows<7>, K::template rows<8>};
  kRows[nx < 1                  ? 0
        : nx > kMaxWideTileRows ? kMaxWideTileRows - 1
                                : nx - 1](w, ws, nw, x, xs, k, out, os);
}

}  // namespace kestrel::cpu
