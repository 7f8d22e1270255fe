#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "model/calibration.h"
#include "model/loader.h"
#include "model/modelslim.h"
#include "tensor/quant_formats.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDynamic = "W8A8_DYNAMIC";
constexpr const char* kStatic = "W8A8";
constexpr const char* kInt4 = "W4A8_DYNAMIC";

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

namespace {

// One linear's static W8A8 tensors from its calibrated input range, as msModelSlim's asymmetric
// per-tensor min-max (and tools/make_modelslim_fixtures.py): s_x = (hi − lo) / 255, offset =
// round(−128 − lo / s_x), deq_scale = s_x · s_w per row, quant_bias = −offset · Σ codes per row.
struct StaticActivations {
  float scale = 0.0f, offset = 0.0f;
};
StaticActivations static_activations(const ActivationRange& r) {
  const double s = double(float(std::max(double(r.hi) - double(r.lo), 1e-6) / 255.0));
  return {float(s), float(std::nearbyint(-128.0 - double(r.lo) / s))};
}

// A 2-D float tensor's int8 codes and row scales, computed once when its codes are written (the
// tensors written after it read them).
struct Int8Weight {
  Tensor source;
  std::vector<float> scales;
  std::vector<int64_t> row_sums;  // Σ codes per row
};

void quantize_into(Int8Weight& q, int8_t* codes) {
  const int64_t rows = q.source.rows(), cols = q.source.cols();
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(q.source.dtype, q.source.row(r), row.data(), cols);
    int8_t* c = codes + r * cols;
    quantize_int8_rows(row.data(), 1, cols, c, q.scales.data() + r);
    q.row_sums[size_t(r)] = std::accumulate(c, c + cols, int64_t{0});
  }
}

// The tensors of one quantized linear, in the order the writer needs: codes first.
void add_int8_linear(const std::string& prefix, const Tensor& t,
                     const std::optional<StaticActivations>& act, std::vector<SafetensorsOut>& out,
                     nlohmann::ordered_json& description) {
  const int64_t rows = t.rows(), cols = t.cols();
  auto q = std::make_shared<Int8Weight>(
      Int8Weight{t, std::vector<float>(size_t(rows)), std::vector<int64_t>(size_t(rows))});
  out.push_back({prefix + ".weight", DType::I8, {rows, cols}, [q](std::span<uint8_t> dst) {
                   quantize_into(*q, reinterpret_cast<int8_t*>(dst.data()));
                 }});
  std::vector<const char*> parts = {".weight"};
  if (!act) {
    out.push_back({prefix + ".weight_scale", DType::F32, {rows, 1}, [q](std::span<uint8_t> dst) {
                     std::memcpy(dst.data(), q->scales.data(), dst.size());
                   }});
    out.push_back({prefix + ".weight_offset", DType::F32, {rows, 1}, [](std::span<uint8_t>) {}});
    parts.insert(parts.end(), {".weight_scale", ".weight_offset"});
  } else {
    const StaticActivations a = *act;
    out.push_back({prefix + ".input_scale", DType::F32, {1}, [a](std::span<uint8_t> dst) {
                     std::memcpy(dst.data(), &a.scale, sizeof a.scale);
                   }});
    out.push_back({prefix + ".input_offset", DType::F32, {1}, [a](std::span<uint8_t> dst) {
                     std::memcpy(dst.data(), &a.offset, sizeof a.offset);
                   }});
    out.push_back({prefix + ".deq_scale", DType::F32, {rows}, [q, a](std::span<uint8_t> dst) {
                     auto* d = reinterpret_cast<float*>(dst.data());
                     for (size_t r = 0; r < q->scales.size(); ++r)
                       d[r] = float(double(a.scale) * double(q->scales[r]));
                   }});
    out.push_back({prefix + ".quant_bias", DType::I32, {rows}, [q, a](std::span<uint8_t> dst) {
                     auto* b = reinterpret_cast<int32_t*>(dst.data());
                     for (size_t r = 0; r < q->row_sums.size(); ++r)
                       b[r] = int32_t(-int64_t(a.offset) * q->row_sums[r]);
                   }});
    parts.insert(parts.end(), {".input_scale", ".input_offset", ".deq_scale", ".quant_bias"});
  }
  const char* type = act ? kStatic : kDynamic;
  for (const char* part : parts) description[prefix + part] = type;
}

// A routed expert's W4A8_DYNAMIC tensors, as msModelSlim's w4a8 writer (and
// tools/make_modelslim_fixtures.py): codes clamp(round(w / s), -8, 7) with s = max|w| / 7 per
// row, two rows per byte (row 2r in the low nibble, 2r + 1 in the high), and scale_bias =
// 8 · s · Σ codes per row, split over 16 column chunks for down_proj (its TP row split) and one
// for the others.
void add_int4_linear(const std::string& prefix, const Tensor& t, std::vector<SafetensorsOut>& out,
                     nlohmann::ordered_json& description) {
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t chunks = prefix.ends_with("down_proj") ? 16 : 1;
  struct Int4Weight {
    Tensor source;
    std::vector<float> scales;
    std::vector<double> chunk_sums;  // [rows, chunks] Σ codes
  };
  auto q = std::make_shared<Int4Weight>(
      Int4Weight{t, std::vector<float>(size_t(rows)), std::vector<double>(size_t(rows * chunks))});
  out.push_back({prefix + ".weight",
                 DType::I8,
                 {rows / 2, cols},
                 [q, rows, cols, chunks](std::span<uint8_t> dst) {
                   std::vector<float> row(static_cast<size_t>(cols));
                   std::vector<int8_t> codes(static_cast<size_t>(cols));
                   for (int64_t r = 0; r < rows; ++r) {
                     dequantize_row(q->source.dtype, q->source.row(r), row.data(), cols);
                     float amax = 0.0f;
                     for (float v : row) amax = std::max(amax, std::fabs(v));
                     const float s = amax > 0.0f ? amax / 7.0f : 1.0f;
                     q->scales[size_t(r)] = s;
                     for (int64_t c = 0; c < cols; ++c)
                       codes[size_t(c)] =
                           int8_t(std::clamp(std::nearbyint(row[size_t(c)] / s), -8.0f, 7.0f));
                     // numpy's array_split: the first cols % chunks chunks one column longer.
                     const int64_t base = cols / chunks, extra = cols % chunks;
                     for (int64_t j = 0, c = 0; j < chunks; ++j) {
                       const int64_t len = base + (j < extra ? 1 : 0);
                       q->chunk_sums[size_t(r * chunks + j)] =
                           double(std::accumulate(codes.begin() + c, codes.begin() + c + len, 0));
                       c += len;
                     }
                     const int shift = r % 2 == 0 ? 0 : 4;
                     uint8_t* packed = dst.data() + (r / 2) * cols;
                     for (int64_t c = 0; c < cols; ++c)
                       packed[c] =
                           uint8_t(packed[c] | ((uint8_t(codes[size_t(c)]) & 0xF) << shift));
                   }
                 }});
  out.push_back({prefix + ".weight_scale", DType::F32, {rows, 1}, [q](std::span<uint8_t> dst) {
                   std::memcpy(dst.data(), q->scales.data(), dst.size());
                 }});
  out.push_back({prefix + ".weight_offset", DType::F32, {rows, 1}, [](std::span<uint8_t>) {}});
  out.push_back(
      {prefix + ".scale_bias", DType::F32, {rows, chunks}, [q, chunks](std::span<uint8_t> dst) {
         auto* b = reinterpret_cast<float*>(dst.data());
         for (size_t i = 0; i < q->chunk_sums.size(); ++i)
           b[i] = float(8.0 * double(q->scales[i / size_t(chunks)]) * q->chunk_sums[i]);
       }});
  for (const char* part : {".weight", ".weight_scale", ".weight_offset", ".scale_bias"})
    description[prefix + part] = kInt4;
}

}  // namespace

Expected<QuantizeReport> quantize_checkpoint(const QuantizeOptions& o) {
  std::error_code ec;
  if (o.quant_type != kDynamic && o.quant_type != kStatic && o.quant_type != kInt4)
    return make_error(
        "kestrel quantize: --quant-type {} is not supported (W8A8_DYNAMIC, W8A8, W4A8_DYNAMIC)",
        o.quant_type);
  const bool calibrated = o.quant_type == kStatic;
  if (calibrated && o.calibration.empty())
    return make_error(
        "kestrel quantize: W8A8 quantizes activations with static ranges; give calibration "
        "samples (--calibration-file)");
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
  std::vector<std::string> names;
  std::map<std::string, ActivationRange> ranges;
  for (const std::string& name : ckpt->names()) {
    KASSIGN(const Tensor t, ckpt->tensor(name));
    const bool floating = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
    if (quantized_by_writer(name, config.num_hidden_layers) && t.shape.ndim == 2 && floating)
      names.push_back(name);
  }
  if (calibrated) {
    CalibrationRequest req{o.input, o.calibration, {}, o.threads};
    for (const std::string& name : names)
      if (name.find(".experts.") == std::string::npos)
        req.weights[name] = ckpt->tensor(name)->shape;
    KASSIGN(ranges, calibrate_linear_inputs(req));
  }

  std::vector<SafetensorsOut> out;
  nlohmann::ordered_json description = {{"version", "1.0.0"},
                                        {"model_quant_type", calibrated ? kStatic : kDynamic},
                                        {"group_size", 0}};
  for (const std::string& name : ckpt->names()) {
    KASSIGN(const Tensor t, ckpt->tensor(name));
    report.bytes_in += t.nbytes();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::vector<int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.ndim);
      out.push_back({name, t.dtype, shape,
                     [t](std::span<uint8_t> dst) { std::memcpy(dst.data(), t.data, dst.size()); }});
      description[name] = "FLOAT";
      ++report.kept;
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - 7);
    ++report.quantized;
    if (o.quant_type == kInt4 && name.find(".experts.") != std::string::npos) {
      if (t.rows() % 2 != 0)
        return make_error("kestrel quantize: {} has {} rows; W4A8 packs two rows per byte", name,
                          t.rows());
      add_int4_linear(prefix, t, out, description);
      ++report.quantized_int4;
      continue;
    }
    std::optional<StaticActivations> act;
    if (const auto r = ranges.find(name); r != ranges.end() && r->second.rows > 0)
      act = static_activations(r->second);
    add_int8_linear(prefix, t, act, out, description);
    report.quantized_static += act ? 1 : 0;
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
