#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "model/loader.h"
#include "model/modelslim.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "tensor/quant_formats.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kType = "W8A8_DYNAMIC";

bool copied_file(const fs::path& p) {
  const std::string name = p.filename().string(), ext = p.extension().string();
  if (name.ends_with(".safetensors.index.json")) return false;
  return ext == ".json" || ext == ".py" || ext == ".txt" || ext == ".jinja" ||
         name == "tokenizer.model" || ext == ".tiktoken";
}

// config.json without quantization_config, here and in a text_config.
Status write_config(const fs::path& from, const fs::path& to) {
  KASSIGN(const std::string text, read_text_file(from.string()));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!j.is_object()) return make_error("{}: not a JSON object", from.string());
  j.erase("quantization_config");
  if (j.contains("text_config") && j["text_config"].is_object())
    j["text_config"].erase("quantization_config");
  std::ofstream(to) << j.dump(2) << "\n";
  return Status::Ok();
}

}  // namespace

bool quantized_by_writer(const std::string& name, int64_t num_layers) {
  static const char* const kProjections[] = {"q_proj",    "k_proj",    "v_proj",
                                             "o_proj",    "gate_proj", "up_proj",
                                             "down_proj", "q_a_proj",  "kv_a_proj_with_mqa",
                                             "q_b_proj",  "kv_b_proj"};
  constexpr std::string_view kLayers = "model.layers.";
  if (!name.starts_with(kLayers) || !name.ends_with(".weight")) return false;
  const std::string stem = name.substr(0, name.size() - 7);
  const std::string last = stem.substr(stem.rfind('.') + 1);
  if (std::find(std::begin(kProjections), std::end(kProjections), last) == std::end(kProjections))
    return false;
  // A layer past the decoder's is DeepSeek's MTP block, FLOAT in the published -mtp checkpoints.
  return std::stoll(name.substr(kLayers.size())) < num_layers;
}

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* codes, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    scales[r] = s;
    for (int64_t c = 0; c < cols; ++c)
      codes[r * cols + c] = int8_t(std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f));
  }
}

Expected<QuantizeReport> quantize_checkpoint(const QuantizeOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.input, ec))
    return make_error("kestrel quantize: '{}' is not a model directory", o.input);
  if (fs::exists(fs::path(o.input) / kModelSlimDescriptionFile, ec))
    return make_error("kestrel quantize: '{}' is already an msModelSlim checkpoint", o.input);
  KASSIGN(const ModelConfig config, read_model_config(o.input, "safetensors"));
  if (config.fp8.enabled)
    return make_error("kestrel quantize: '{}' holds FP8 weights; give it a bf16 checkpoint",
                      o.input);
  if (fs::exists(o.output, ec) && !fs::is_empty(o.output, ec))
    return make_error("kestrel quantize: '{}' exists and is not empty", o.output);
  fs::create_directories(o.output, ec);
  if (ec) return make_error("kestrel quantize: cannot create '{}': {}", o.output, ec.message());
  KASSIGN(auto ckpt, SafetensorsCheckpoint::open_dir(o.input));

  QuantizeReport report;
  std::vector<SafetensorsOut> out;
  nlohmann::ordered_json description = {
      {"version", "1.0.0"}, {"model_quant_type", kType}, {"group_size", 0}};
  for (const std::string& name : ckpt->names()) {
    KASSIGN(const Tensor t, ckpt->tensor(name));
    report.bytes_in += t.nbytes();
    const bool floating = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
    if (!quantized_by_writer(name, config.num_hidden_layers) || t.shape.ndim != 2 || !floating) {
      std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
      out.push_back({name, t.dtype, shape,
                     [t](std::span<uint8_t> dst) { std::memcpy(dst.data(), t.data, dst.size()); }});
      description[name] = "FLOAT";
      ++report.kept;
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    // The weight's codes and scales are computed once, when its codes are written; the scale
    // tensors written after it read them.
    auto scales = std::make_shared<std::vector<float>>(size_t(rows));
    const std::string prefix = name.substr(0, name.size() - 7);
    out.push_back({name, DType::I8, {rows, cols}, [t, rows, cols, scales](std::span<uint8_t> dst) {
                     std::vector<float> row(static_cast<size_t>(cols));
                     for (int64_t r = 0; r < rows; ++r) {
                       dequantize_row(t.dtype, t.row(r), row.data(), cols);
                       quantize_int8_rows(row.data(), 1, cols,
                                          reinterpret_cast<int8_t*>(dst.data()) + r * cols,
                                          scales->data() + r);
                     }
                   }});
    out.push_back(
        {prefix + ".weight_scale", DType::F32, {rows, 1}, [scales](std::span<uint8_t> dst) {
           std::memcpy(dst.data(), scales->data(), dst.size());
         }});
    out.push_back({prefix + ".weight_offset", DType::F32, {rows, 1}, [](std::span<uint8_t>) {}});
    for (const char* part : {".weight", ".weight_scale", ".weight_offset"})
      description[prefix + part] = kType;
    ++report.quantized;
  }
  for (const SafetensorsOut& t : out) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    report.bytes_out += dtype_bytes(t.dtype, numel);
  }
  // The writer sorts nothing: a weight's codes come before the scales that read them.
  KTRY(write_safetensors((fs::path(o.output) / "quant_model_weights.safetensors").string(), out));
  std::ofstream(fs::path(o.output) / kModelSlimDescriptionFile) << description.dump(1) << "\n";
  for (const auto& entry : fs::directory_iterator(o.input, ec)) {
    if (!entry.is_regular_file() || !copied_file(entry.path())) continue;
    const fs::path to = fs::path(o.output) / entry.path().filename();
    if (entry.path().filename() == "config.json") {
      KTRY(write_config(entry.path(), to));
    } else {
      fs::copy_file(entry.path(), to, fs::copy_options::overwrite_existing, ec);
      if (ec)
        return make_error("kestrel quantize: copying {}: {}", entry.path().string(), ec.message());
    }
  }
  return report;
}

}  // namespace kestrel
