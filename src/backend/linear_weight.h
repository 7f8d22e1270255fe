// backend/linear_weight.h — a Linear layer's weight as the backend multiplies it: the stored codes
// (a plain Tensor view), what turns them into values (scales, an activation scheme), the output
// bias, and the plan the backend chose for it (Backend::prepare_weight).
//
// The model loads the first three and owns their memory; the backend owns the plan and any
// packed copy it made, so both must outlive every use of the weight. Nothing here is written
// after loading, so any thread may read a LinearWeight.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace kestrel {

// How a weight's codes become values, beyond what its dtype says.
struct WeightScales {
  // Block scales of an F8_E4M3 weight (DeepSeek-V3's `weight_scale_inv`): value[r][c] =
  // code[r][c] · block[(r / block_rows) · ceil(cols / block_cols) + c / block_cols]; nullptr:
  // every scale is 1. An I8 weight has one scale per row (block_rows 1, block_cols the row).
  const float* block = nullptr;
  int64_t block_rows = 0, block_cols = 0;
  // I8 weights (msModelSlim W8A8 and W8A8_DYNAMIC): act_scale 0 quantizes activations per token,
  // symmetric; otherwise per tensor, code = round(x / act_scale + act_offset), and row_bias (one
  // int32 per row, or null) is added to the integer sums.
  float act_scale = 0.0f, act_offset = 0.0f;
  const int32_t* row_bias = nullptr;
};

// The choice a backend made for one weight: which kernel multiplies it, how activations enter it,
// and the packed copy it reads. Each backend derives its own; the model only holds the pointer.
class LinearPlan {
 public:
  virtual ~LinearPlan() = default;
  // One line for logs: the kernel, its activation format and packing.
  virtual std::string describe() const = 0;
};

struct LinearWeight {
  LinearWeight() = default;
  explicit LinearWeight(Tensor w, WeightScales scales = {}) : w(w), scales(scales) {}

  Tensor w;  // [rows = out features, cols = in features]
  WeightScales scales;
  // A float bias added to every output row (one per row, or null): a checkpoint's
  // `<linear>.bias`, where the layer does not fold it elsewhere.
  const float* bias = nullptr;
  const LinearPlan* plan = nullptr;  // set by Backend::prepare_weight; null: chosen per call

  int64_t rows() const { return w.rows(); }
  int64_t cols() const { return w.cols(); }
  size_t nbytes() const { return w.nbytes(); }
  bool defined() const { return w.defined(); }
};

}  // namespace kestrel
