// model/modelslim.h — msModelSlim's quantized checkpoints, as vLLM-Ascend's `--quantization
// ascend` reads them (../shared/docs/reference/specdec-quant.md §2): quant_model_description.json
// beside config.json gives every saved tensor's quantization type ("W8A8", "W8A8_DYNAMIC",
// "FLOAT", ...), the weights are in quant_model_weights*.safetensors. A layer's type is its
// weight's; an MTP layer's `shared_head.` is not part of its name here. Plain data and pure
// functions; the loader reads it once and the layers' load_linear() consults it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/status.h"

namespace kestrel {

struct ModelSlimDescription {
  std::string version;
  std::string model_quant_type;
  int64_t group_size = 0;  // 0: per channel
  std::string kv_cache_type;
  bool quarot = false;                       // metadata.quarot: rotations folded into the weights
  std::map<std::string, std::string> types;  // tensor name → type
  // How W8A8_MIX layers run (they carry both schemes' tensors): static W8A8 on a PD decode
  // instance (--kv-transfer-config kv_consumer), per-token W8A8_DYNAMIC elsewhere, as vLLM-Ascend
  // runs them. Set by the loader, not read from the file.
  bool mix_static = false;

  // The scheme a layer of `type` runs: W8A8_MIX resolved as above, other types as they are.
  std::string scheme(const std::string& type) const;

  // The type of the layer whose weight is `prefix + ".weight"` (or `".weight_packed"`, a name
  // vLLM-Ascend reads as the weight); FLOAT when it is not listed.
  std::string layer_type(const std::string& prefix) const;
};

inline constexpr const char* kModelSlimDescriptionFile = "quant_model_description.json";
// kv_cache_type values: int8 K and V with static per-channel scales and offsets; MXFP8 K with
// per-row scales and E4M3 V with static per-channel E8M0 scales (model/kv_scales.h).
inline constexpr const char* kModelSlimC8 = "C8";
inline constexpr const char* kModelSlimMxfp8Kv = "K_DYNAMIC_V_STATIC_MXFP8_PER_CHANNEL";

// The description in directory `dir`; none when it has no such file. Errors name the file.
Expected<std::optional<ModelSlimDescription>> read_modelslim_description(const std::string& dir);

// Refuses, naming the type and a tensor of it, what Kestrel does not run: any type but FLOAT,
// W8A8, W8A8_DYNAMIC, W8A8_MIX and W4A8_DYNAMIC (per channel) for weights, C8 for KV cache scales,
// a KV cache type but C8 and the MXFP8 one, and QuaRot's online rotations.
Status check_modelslim(const ModelSlimDescription& d);

// W4A8_DYNAMIC weights as msModelSlim packs them: [rows / 2, cols] bytes, byte (r, c) holding
// rows 2r (low nibble) and 2r + 1 (high nibble) of column c as two's-complement int4. Widened to
// int8 [rows, cols] (rows even).
void unpack_w4a8_rows(const int8_t* packed, int64_t rows, int64_t cols, int8_t* out);

// The `scale_bias` msModelSlim stores beside W4A8_DYNAMIC weights (a term for the NPU's int4
// kernel, which Kestrel's exact int32 sum does not need): per row, summed over its `chunks`
// columns ([rows, chunks], 1 or 16), it is 8 · scale[r] · Σ_c w[r][c]. Checking it confirms the
// unpacking; an error names the first row that disagrees beyond float rounding.
Status check_w4a8_scale_bias(const int8_t* w, const float* scale, const float* scale_bias,
                             int64_t rows, int64_t cols, int64_t chunks);

}  // namespace kestrel
