#include "backend/cpu/linear_runs.h"

#include <algorithm>

#include "backend/cpu/fp8_matmul.h"

namespace kestrel::cpu {
namespace {

// Weight rows are walked in groups of about this many bytes when several activation tiles
// revisit them, so a group stays in L2 between tiles.
constexpr int64_t kWeightGroupBytes = int64_t(256) << 10;
// Bytes of activation rows one kernel call may read: about half of a 48 KiB L1.
constexpr int64_t kActivationTileBytes = int64_t(24) << 10;

// Weight rows [n0, n1) against every activation row, `dot_rows(j0, j1, x, nx, out)` computing
// rows [j0, j1)'s outputs for a tile of nx activation rows (out at column j0). Each output is
// computed whole by one kernel call, so neither the split nor the tile it lands in changes its
// summation order.
template <class DotRows>
void tile_loop(const LinearKernel& kern, const LinearCall& c, int64_t n0, int64_t n1,
               DotRows dot_rows) {
  // Activation tiles stay within half of L1, next to the weight row streaming past them. Float
  // kernels keep at least four rows: they convert each weight vector once per call, and at large
  // K their f32 rows would otherwise shrink the tile to one row, converting every weight once per
  // activation row (four rows from L2 beat that).
  const int min_tile = kern.act == ActFormat::kF32 ? std::min(4, kern.tile_rows) : 1;
  const int tile = int(
      std::clamp<int64_t>(kActivationTileBytes / int64_t(c.x_stride), min_tile, kern.tile_rows));
  // With several activation tiles, weight rows go in groups that stay in L2 while every tile
  // passes over them; with one tile each weight row is streamed exactly once.
  const int64_t group =
      c.m <= tile
          ? c.n
          : std::max<int64_t>(1, kWeightGroupBytes / std::max<int64_t>(1, int64_t(c.row_bytes)));
  for (int64_t g0 = n0; g0 < n1; g0 += group) {
    const int64_t g1 = std::min(n1, g0 + group);
    for (int64_t m0 = 0; m0 < c.m; m0 += tile) {
      const int nx = int(std::min<int64_t>(tile, c.m - m0));
      const uint8_t* xt = c.x + size_t(m0) * c.x_stride;
      float* y = c.y + m0 * c.n;
      dot_rows(g0, g1, xt, nx, y + g0);
    }
  }
}

}  // namespace

void run_dot_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                  int64_t u1) {
  tile_loop(kern, c, u0, u1, [&](int64_t j0, int64_t j1, const uint8_t* x, int nx, float* out) {
    if (kern.rows_dot != nullptr) {
      kern.rows_dot(c.weights + size_t(j0) * c.row_bytes, c.row_bytes, j1 - j0, x, c.x_stride, nx,
                    c.k, out, c.n);
      return;
    }
    for (int64_t j = j0; j < j1; ++j)
      kern.dot(c.weights + size_t(j) * c.row_bytes, x, c.x_stride, nx, c.k, out + (j - j0), c.n);
  });
}

void run_fp8_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                  int64_t u1) {
  const Fp8Weight w = fp8_weight(*c.w);
  tile_loop(kern, c, u0, u1, [&](int64_t j0, int64_t j1, const uint8_t* x, int nx, float* out) {
    kern.fp8_rows(w, j0, j1 - j0, x, c.x_stride, nx, out, c.n);
  });
}

void run_int8_rows(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                   int64_t u1) {
  tile_loop(kern, c, u0, u1, [&](int64_t j0, int64_t j1, const uint8_t* x, int nx, float* out) {
    for (int64_t j = j0; j < j1; ++j) {
      const Int8Row row = int8_row(*c.w, j);
      kern.dot(&row, x, c.x_stride, nx, c.k, out + (j - j0), c.n);
    }
  });
}

void run_q8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch, int64_t u0,
                   int64_t u1) {
  const PackedGemmFn gemm = c.amx && kern.q8_gemm_amx != nullptr ? kern.q8_gemm_amx : kern.q8_gemm;
  gemm({c.w->w.dtype, c.weights, c.n, c.k, c.packed_x, c.m, c.y, c.n, &scratch}, u0, u1);
}

void run_float_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                      int64_t u1) {
  kern.float_gemm(
      {c.w->w.dtype, c.weights, c.n, c.k, reinterpret_cast<const float*>(c.x), c.m, c.y, c.n, c.xt},
      u0, u1);
}

void run_bf16_tiles(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                    int64_t u1) {
  kern.bf16_gemm(
      {c.weights, c.n, c.k, reinterpret_cast<const uint16_t*>(c.x), c.x_stride, c.m, c.y, c.n}, u0,
      u1);
}

void run_fp8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena&, int64_t u0,
                    int64_t u1) {
  kern.fp8_panels(fp8_weight(*c.w), c.weights, c.n, c.x, c.x_stride, c.m, c.y, c.n, u0, u1);
}

void run_kquant_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                       int64_t u0, int64_t u1) {
  kern.kquant_gemm({c.w->w.dtype, c.weights, c.n, c.k, c.x, c.x_stride, c.m, c.y, c.n, &scratch},
                   u0, u1);
}

void run_int8_panels(const LinearKernel& kern, const LinearCall& c, ScratchArena& scratch,
                     int64_t u0, int64_t u1) {
  const Int8GemmFn gemm =
      c.amx && kern.int8_gemm_amx != nullptr ? kern.int8_gemm_amx : kern.int8_gemm;
  const WeightScales& s = c.w->scales;
  gemm({c.weights, c.n, c.k, c.x, c.x_stride, c.m, c.y, c.n, s.block, s.row_bias,
        kern.packing == Packing::kInt4Panels, &scratch},
       u0, u1);
}

}  // namespace kestrel::cpu
