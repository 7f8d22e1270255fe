#include "model/modelslim.h"

#include <cmath>
#include <filesystem>

#include <array>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "model/kv_scales.h"

namespace kestrel {

namespace {

// Global keys of the description; every other string entry names a tensor.
bool is_global_key(const std::string& k) {
  return k == "version" || k == "model_quant_type" || k == "group_size" || k == "metadata" ||
         k == "optional" || k == "kv_cache_type" || k == "kv_quant_type" || k == "fa_quant_type" ||
         k == "indexer_quant_type";
}

bool runs(const std::string& type) {
  return type == "FLOAT" || type == "W8A8" || type == "W8A8_DYNAMIC" || type == "W4A8_DYNAMIC" ||
         type == "W8A8_MIX";
}

}  // namespace

std::string ModelSlimDescription::scheme(const std::string& type) const {
  if (type == "W8A8_MIX") return mix_static ? "W8A8" : "W8A8_DYNAMIC";
  return type;
}

std::string ModelSlimDescription::layer_type(const std::string& prefix) const {
  std::string stem = prefix;
  if (const size_t at = stem.find("shared_head."); at != std::string::npos) stem.erase(at, 12);
  for (const char* suffix : {".weight", ".weight_packed"})
    if (const auto it = types.find(stem + suffix); it != types.end()) return it->second;
  return "FLOAT";
}

Expected<std::optional<ModelSlimDescription>> read_modelslim_description(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / kModelSlimDescriptionFile;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::optional<ModelSlimDescription>();
  KASSIGN(const std::string text, read_text_file(path.string()));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return make_error("{}: not a JSON object", path.string());
  ModelSlimDescription d;
  try {
    d.version = j.value("version", std::string());
    d.model_quant_type = j.value("model_quant_type", std::string());
    d.group_size = j.value("group_size", int64_t(0));
    d.kv_cache_type = j.value("kv_cache_type", j.value("kv_quant_type", std::string()));
    if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("quarot")) {
      d.quarot = true;
      // Online rotations (applied before o_proj / down_proj at inference) have no consumer here,
      // nor in vLLM-Ascend.
      for (const auto& [kind, v] : j["metadata"]["quarot"].items())
        if (v.is_object() && v.contains("layers") && !v["layers"].empty())
          return make_error(
              "{}: metadata.quarot.{} asks for online rotations at inference, which Kestrel does "
              "not apply (offline QuaRot checkpoints need none)",
              path.string(), kind);
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error("{}: {}", path.string(), e.what());
  }
  for (const auto& [key, v] : j.items()) {
    if (is_global_key(key)) continue;
    if (!v.is_string())
      return make_error("{}: the type of '{}' is not a string", path.string(), key);
    d.types[key] = v.get<std::string>();
  }
  return std::optional<ModelSlimDescription>(std::move(d));
}

namespace {

// The modules vLLM-Ascend loads fused (its packed_modules_model_mapping), by the last name part of
// their members' weights; a layer's routed experts are one fused module too.
constexpr std::pair<const char*, std::array<const char*, 3>> kFused[] = {
    {"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
    {"gate_up_proj", {"gate_proj", "up_proj", nullptr}},
    {"fused_qkv_a_proj", {"q_a_proj", "kv_a_proj_with_mqa", nullptr}},
    {"in_proj_qkvz", {"in_proj_qkv", "in_proj_z", nullptr}},
    {"in_proj_ba", {"in_proj_b", "in_proj_a", nullptr}},
};

// The fused module a weight belongs to ("" for none): model.layers.1.self_attn.qkv_proj for
// model.layers.1.self_attn.k_proj.weight, model.layers.1.mlp.experts for any expert's weight.
std::string fused_module(const std::string& name) {
  const size_t suffix = name.ends_with(".weight") ? 7 : name.ends_with(".weight_packed") ? 14 : 0;
  if (suffix == 0) return "";
  if (const size_t e = name.find(".experts."); e != std::string::npos) return name.substr(0, e + 8);
  const std::string stem = name.substr(0, name.size() - suffix);
  const size_t dot = stem.rfind('.');
  const std::string last = stem.substr(dot + 1);
  for (const auto& [fused, members] : kFused)
    for (const char* m : members)
      if (m != nullptr && last == m) return stem.substr(0, dot + 1) + fused;
  return "";
}

}  // namespace

Status check_modelslim(const ModelSlimDescription& d) {
  if (!d.kv_cache_type.empty() && d.kv_cache_type != kModelSlimC8 &&
      d.kv_cache_type != kModelSlimMxfp8Kv)
    return make_error("msModelSlim checkpoint: kv_cache_type {} is not supported (C8 and {} are)",
                      d.kv_cache_type, kModelSlimMxfp8Kv);
  for (const auto& [name, type] : d.types) {
    // Side tensors of a quantized layer carry its type too; KV cache scales have their own.
    if (is_kv_scale_tensor(name) && (type == kModelSlimC8 || type == d.kv_cache_type)) continue;
    if (!runs(type))
      return make_error("msModelSlim checkpoint: type {} (tensor {}) is not supported", type, name);
    if ((type == "W8A8_DYNAMIC" || type == "W4A8_DYNAMIC") && d.group_size > 0)
      return make_error(
          "msModelSlim checkpoint: {} with group_size {} (tensor {}): only per-channel weight "
          "scales are supported",
          type, d.group_size, name);
  }
  // One quantization per fused module, as vLLM-Ascend requires of its shards.
  std::map<std::string, std::pair<std::string, std::string>> first;  // module -> (weight, type)
  for (const auto& [name, type] : d.types) {
    const std::string module = fused_module(name);
    if (module.empty()) continue;
    const auto [it, fresh] = first.try_emplace(module, name, type);
    if (!fresh && it->second.second != type)
      return make_error(
          "msModelSlim checkpoint: the shards of {} disagree: {} is {}, {} is {} (a fused "
          "module takes one quantization)",
          module, it->second.first, it->second.second, name, type);
  }
  return Status::Ok();
}

void unpack_w4a8_rows(const int8_t* packed, int64_t rows, int64_t cols, int8_t* out) {
  for (int64_t r = 0; r < rows / 2; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const auto b = uint8_t(packed[r * cols + c]);
      // Sign-extend each nibble: shift it to the top of an int8, then arithmetically back.
      out[(2 * r) * cols + c] = int8_t(int8_t(uint8_t(b << 4)) >> 4);
      out[(2 * r + 1) * cols + c] = int8_t(int8_t(b) >> 4);
    }
}

Status check_w4a8_scale_bias(const int8_t* w, const float* scale, const float* scale_bias,
                             int64_t rows, int64_t cols, int64_t chunks) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += w[r * cols + c];
    double stored = 0, magnitude = 0;
    for (int64_t j = 0; j < chunks; ++j) stored += scale_bias[r * chunks + j];
    for (int64_t c = 0; c < cols; ++c) magnitude += std::fabs(double(w[r * cols + c]));
    const double want = 8.0 * double(scale[r]) * double(sum);
    // Float rounding of the writer's per-chunk sums, relative to the terms' size.
    const double tol = 1e-5 * 8.0 * double(scale[r]) * (magnitude + 1.0);
    if (std::fabs(stored - want) > tol)
      return make_error("scale_bias of row {} is {}, the unpacked weights give {}", r, stored,
                        want);
  }
  return Status::Ok();
}

}  // namespace kestrel
