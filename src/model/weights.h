// model/weights.h — loading a model's tensors: f32 vectors for norms and biases, and Linear
// weights of any stored dtype, FP8 block scales included.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

// Small vectors (norms, biases) are converted to f32 once at load.
Expected<std::vector<float>> load_vector(WeightSource& src, const std::string& name, int64_t n);

// Owns what loading had to convert (FP8 scales stored as bf16, dequantized matrices, the
// column slices of tensor-parallel shards).
struct WeightStore {
  std::deque<std::vector<float>> f32;
  std::deque<std::vector<uint8_t>> bytes;
};

// The part of a [rows, cols] weight a tensor-parallel rank holds (model/tp_plan.h): output rows
// (a column-parallel linear; a view) or input columns (row-parallel; copied, at quantization
// block boundaries). An empty range is the whole dimension.
struct LinearShard {
  IndexRange rows, cols;
};

// `prefix + ".weight"` of shape [rows, cols] (the whole tensor's), or its `shard`. An F8_E4M3
// weight gets its block scales from `prefix + ".weight_scale_inv"` ([ceil(rows / br),
// ceil(cols / bc)], the config's block size); it cannot be sharded yet.
Expected<Tensor> load_linear(WeightSource& src, const std::string& prefix, int64_t rows,
                             int64_t cols, const ModelConfig& cfg, WeightStore& store,
                             const LinearShard& shard = {});

// The values of a 2-D weight (any dtype, block scales applied) as f32, row-major.
std::vector<float> dequantize_matrix(const Tensor& w);

}  // namespace kestrel
