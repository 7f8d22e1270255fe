// backend/cpu/bf16_tiles.h — a packed copy of BF16 weights for AMX's TDPBF16PS, used when the
// model's activations are BF16: the GEMM then takes bf16 activations (each f32 input rounded to
// the nearest bf16, a no-op for activations the model already rounded), multiplies exactly and
// accumulates in f32 tiles, as a bf16 reference matmul does.
//
// Layout: output rows in panels of kPanelRows; K in blocks of 32 (the last zero-padded); per
// panel and block 1 KiB, the tile's B operand: 16 pair rows of 64 bytes, pair row i holding, for
// each of the panel's rows n, elements 32b + 2i and 32b + 2i + 1 at bytes 4n .. 4n + 3.
//
// Arithmetic: every output is the f32 tile accumulation of its bf16 products, block after block
// in K order, one TDPBF16PS per block; the instruction computes each output from its own row and
// column only, so results do not depend on the batch, the tile or the thread split (a single row
// runs the same instructions with the other fifteen tile rows zero).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/packed_matmul.h"
#include "tensor/tensor.h"

namespace kestrel::cpu {

constexpr int kBf16TileK = 32;

inline int64_t bf16_tile_blocks(int64_t k) {
  return (k + kBf16TileK - 1) / kBf16TileK;
}
inline size_t bf16_tile_panel_bytes(int64_t k) {
  return size_t(bf16_tile_blocks(k)) * kPanelRows * kBf16TileK * 2;
}

// Whether this CPU and kernel run the bf16 tiles (AMX-BF16, permission granted).
bool bf16_tiles_supported();

// The packed copy of a 2-D BF16 weight.
std::unique_ptr<uint8_t[]> pack_bf16_tiles(const Tensor& w);

// Activations for the tiles: M rows (padded with zero rows to a multiple of kPanelRows) of K
// bf16 values (padded with zeros to whole blocks), `stride` bytes apart.
size_t bf16_activation_stride(int64_t k);
void round_rows_to_bf16(const float* x, int64_t k, uint16_t* dst, size_t stride, int64_t r0,
                        int64_t r1);

struct Bf16Gemm {
  const uint8_t* w;  // the packed copy
  int64_t n, k;
  const uint16_t* x;  // packed activations
  size_t x_stride;    // bytes
  int64_t m;
  float* y;
  int64_t y_stride;
};
using Bf16GemmFn = void (*)(const Bf16Gemm& g, int64_t p0, int64_t p1);

// nullptr where this build or CPU lacks AMX-BF16.
Bf16GemmFn amx_bf16_gemm();

}  // namespace kestrel::cpu
