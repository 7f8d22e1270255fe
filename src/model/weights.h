// model/weights.h — loading a model's tensors: f32 vectors for norms and biases, and Linear
// weights of any stored dtype, FP8 block scales included.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "backend/linear_weight.h"
#include "model/config.h"
#include "model/tp_plan.h"
#include "model/weight_source.h"

namespace kestrel {

// Small vectors (norms, biases) are converted to f32 once at load.
Expected<std::vector<float>> load_vector(WeightSource& src, const std::string& name, int64_t n);
// An RMSNorm's weight as the norm multiplies by it: 1 + w for the config's zero-centred norms
// (ModelConfig::norm_offset), in f32 as the reference adds it.
Expected<std::vector<float>> load_norm(WeightSource& src, const std::string& name, int64_t n,
                                       const ModelConfig& cfg);

// An RMSNorm as the block applies it: load_norm's weight and, where the checkpoint has one, a
// bias added to the normed rows (msModelSlim's anti-outlier smoothing moves a shift into the
// norms before the linears it quantizes, as vLLM-Ascend's norm-with-bias kernels apply it).
struct Norm {
  std::vector<float> weight;
  std::vector<float> bias;  // empty: none
};
// `prefix + ".weight"` and, if present, `prefix + ".bias"`.
Expected<Norm> load_norm_with_bias(WeightSource& src, const std::string& prefix, int64_t n,
                                   const ModelConfig& cfg);

// Owns what loading had to convert (FP8 scales stored as bf16, dequantized matrices, int4
// weights widened to int8).
struct WeightStore {
  std::deque<std::vector<float>> f32;
  std::deque<std::vector<int8_t>> i8;
  std::deque<std::vector<int32_t>> i32;
};

// `prefix + ".weight"` of shape [rows, cols] (the whole tensor's), or the rows `shard` of it (a
// tensor-parallel rank's output features, model/tp_plan.h; empty: all rows) as a view. An
// F8_E4M3 weight gets its block scales from `prefix + ".weight_scale_inv"` ([ceil(rows / br),
// ceil(cols / bc)], the config's block size); its shard must start on a scale block. In an
// msModelSlim checkpoint (cfg.modelslim) the layer's type decides: W8A8_DYNAMIC, W4A8_DYNAMIC,
// W8A8 and W8A8_MIX (as one of the first and third, ModelSlimDescription::scheme) give an I8
// weight with its per-row scales and activation scheme (WeightScales). A `prefix + ".bias"`
// becomes LinearWeight::bias, except where a static layer's quant_bias already holds it.
Expected<LinearWeight> load_linear(WeightSource& src, const std::string& prefix, int64_t rows,
                                   int64_t cols, const ModelConfig& cfg, WeightStore& store,
                                   IndexRange shard = {});

// The values of a 2-D weight (any dtype, block scales applied) as f32, row-major.
std::vector<float> dequantize_matrix(const LinearWeight& w);

}  // namespace kestrel
