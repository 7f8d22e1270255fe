// model/calibration.h — the static activation ranges `kestrel quantize --quant-type W8A8` needs:
// the float model runs the calibration samples (a prefill each, f32 activations) on a backend
// that hands every op to the CPU backend and, for the linears asked about, records the least and
// largest value of their inputs. Everything here runs on the calling thread (the CPU backend's
// own threads only inside its kernels).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kestrel {

struct ActivationRange {
  float lo = 0.0f, hi = 0.0f;
  int64_t rows = 0;  // input rows seen (0: the linear never ran)
};

struct CalibrationRequest {
  std::string model;                          // a float safetensors checkpoint's directory
  std::vector<std::vector<int32_t>> samples;  // token ids, each run as one prompt
  std::map<std::string, Shape> weights;       // checkpoint weight name -> its [rows, cols]
  int threads = 0;                            // 0: all cores
  int64_t max_tokens_per_sample = 2048;       // longer samples are cut
};

// Per weight of the request: the range of its linear's inputs over every sample's tokens.
// Weights the forward pass never multiplies (MLA's absorbed kv_b, unrouted experts) have rows 0.
Expected<std::map<std::string, ActivationRange>> calibrate_linear_inputs(
    const CalibrationRequest& request);

}  // namespace kestrel
