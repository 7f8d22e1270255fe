// model/quantize.h — `kestrel quantize` (issue 23): a float safetensors checkpoint (f32, f16 or
// bf16) becomes an msModelSlim-format W8A8_DYNAMIC (or calibrated W8A8) one that `kestrel serve`
// (and vLLM-Ascend's `--quantization ascend`) reads: quant_model_description.json,
// quant_model_weights.safetensors, and the directory's other *.json, *.py, *.txt, *.jinja and
// tokenizer files, config.json without a quantization_config (as msModelSlim's writer leaves
// it). The decoder layers' attention (MLA's included) and MLP projections (the routed and shared
// experts' too) get int8 weights with one symmetric scale per row; everything else stays as it
// is, typed FLOAT. W8A8_DYNAMIC is pure file work; W8A8 first runs the float model over the
// calibration samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kestrel {

struct QuantizeOptions {
  std::string input;   // a model directory of safetensors
  std::string output;  // created (it must not exist or be empty)
  // W8A8_DYNAMIC, or W8A8: static per-tensor asymmetric activations calibrated on
  // `calibration` (token ids, each run as one prompt through the float model, model/
  // calibration.h), written as msModelSlim's W8A8 (input_scale, input_offset, deq_scale,
  // quant_bias). Linears the calibration never runs (MLA's absorbed kv_b, unrouted experts), and
  // MoE experts (which vLLM-Ascend runs only dynamically), stay W8A8_DYNAMIC.
  // W4A8_DYNAMIC: msModelSlim's w4a8 recipe, the routed experts int4 (two per byte along the
  // rows, with scale_bias) and the other linears W8A8_DYNAMIC.
  std::string quant_type = "W8A8_DYNAMIC";
  std::vector<std::vector<int32_t>> calibration;
  int threads = 0;  // of the calibration run; 0: all cores
};

struct QuantizeReport {
  int64_t quantized = 0;         // weights made int8
  int64_t quantized_static = 0;  // of them, with static activations (W8A8)
  int64_t quantized_int4 = 0;    // of them, int4 experts (W4A8_DYNAMIC)
  int64_t kept = 0;              // tensors kept as they were
  uint64_t bytes_in = 0, bytes_out = 0;
};

Expected<QuantizeReport> quantize_checkpoint(const QuantizeOptions& options);

// Whether the writer quantizes this tensor: a `*_proj.weight` of q, k, v, o, gate, up or down,
// or MLA's q_a, q_b, kv_a_proj_with_mqa and kv_b, in one of the first `num_layers` layers under
// model.layers. (Not DeepSeek's MTP layer after them, nor linear-attention projections.)
bool quantized_by_writer(const std::string& name, int64_t num_layers);

// Per row: scale = max|w| / 127 (1 for a row of zeros), code = round-half-even(w / scale),
// within ±127 — the same f32 arithmetic as tools/make_modelslim_fixtures.py.
void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* codes, float* scales);

}  // namespace kestrel
