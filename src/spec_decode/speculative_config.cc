#include "spec_decode/speculative_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "formats/json_flag.h"

namespace kestrel {

namespace {

using json = nlohmann::json;

constexpr std::string_view kFlag = "--speculative-config";

// vLLM's MAX_SPEC_LEN (vllm/v1/sample/rejection_sampler.py): the most drafts one step verifies.
constexpr int64_t kMaxSpecLen = 32;

// The MTP names vLLM accepts; every one but "mtp" is a deprecated alias of it.
constexpr std::array<std::string_view, 9> kMtpNames = {
    "mtp",       "deepseek_mtp",        "qwen3_next_mtp", "qwen3_5_mtp", "glm4_moe_mtp",
    "ernie_mtp", "pangu_ultra_moe_mtp", "mimo_mtp",       "step3p5_mtp"};

enum class KeyType { kString, kInt, kBool, kNull };

struct Key {
  std::string_view name;
  KeyType type;
  int64_t min = 0;  // integers only
};

// Every key Kestrel accepts; null is accepted for each (vLLM's fields are optional, None = unset).
constexpr Key kKeys[] = {
    {"method", KeyType::kString},
    {"num_speculative_tokens", KeyType::kInt, 0},
    {"model", KeyType::kString},
    {"prompt_lookup_min", KeyType::kInt, 1},
    {"prompt_lookup_max", KeyType::kInt, 1},
    {"enforce_eager", KeyType::kBool},
    {"disable_by_batch_size", KeyType::kInt, 1},
    {"draft_tensor_parallel_size", KeyType::kInt, 1},
    {"quantization", KeyType::kNull},
    {"max_model_len", KeyType::kInt, 1},
    {"draft_sample_method", KeyType::kString},
    {"rejection_sample_method", KeyType::kString},
};

bool is_mtp_name(std::string_view m) {
  return std::find(kMtpNames.begin(), kMtpNames.end(), m) != kMtpNames.end();
}

std::string supported_methods() {
  std::string out = "ngram, draft_model";
  for (std::string_view m : kMtpNames) out.append(", ").append(m);
  return out;
}

// Checks one key's value against its type; the error text when it does not fit.
std::optional<Error> check_type(const Key& key, const json& v) {
  if (v.is_null()) return std::nullopt;
  switch (key.type) {
    case KeyType::kString:
      if (v.is_string()) return std::nullopt;
      return make_error("{}: '{}' must be a string", kFlag, key.name);
    case KeyType::kBool:
      if (v.is_boolean()) return std::nullopt;
      return make_error("{}: '{}' must be true or false", kFlag, key.name);
    case KeyType::kInt:
      if (v.is_number_integer() &&
          (v.is_number_unsigned()
               ? v.get<uint64_t>() >= uint64_t(key.min) && v.get<uint64_t>() <= uint64_t{1} << 62
               : v.get<int64_t>() >= key.min))
        return std::nullopt;
      return key.min == 0
                 ? make_error("{}: '{}' must be a non-negative integer", kFlag, key.name)
                 : make_error("{}: '{}' must be an integer >= {}", kFlag, key.name, key.min);
    case KeyType::kNull:
      if (v.is_string())
        return make_error(
            "{} quantization={}: not supported (a draft's quantization is read from its "
            "checkpoint; give null or leave the key out)",
            kFlag, v.get<std::string>());
      return make_error("{}: 'quantization' must be a string or null", kFlag);
  }
  return std::nullopt;
}

std::optional<int64_t> get_int(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<int64_t>();
}

std::optional<std::string> get_string(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

// The reason a method vLLM knows is not run by Kestrel; nullopt for ngram, draft_model and the
// MTP names, and for names vLLM does not know either.
std::optional<std::string> refusal_reason(std::string_view m) {
  if (m == "dspark") return "DSpark drafting needs DeepSeek-V4.1, which Kestrel cannot load yet";
  if (m == "suffix")
    return "suffix decoding is not supported (it needs Arctic Inference's suffix trees); use "
           "ngram";
  if (m == "ngram_gpu") return "not supported; use ngram (the same n-gram proposals)";
  constexpr std::string_view kOthers[] = {"eagle",          "eagle3",       "medusa",
                                          "mlp_speculator", "custom_class", "extract_hidden_states",
                                          "dflash"};
  if (std::find(std::begin(kOthers), std::end(kOthers), m) != std::end(kOthers))
    return fmt::format("{} drafting is not supported (Kestrel runs ngram, draft_model and mtp)", m);
  return std::nullopt;
}

}  // namespace

const char* speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraftModel:
      return "draft_model";
    case SpeculativeMethod::kMtp:
      return "mtp";
  }
  return "?";
}

Expected<std::optional<SpeculativeConfig>> parse_speculative_config(std::string_view text) {
  if (text.empty()) return std::optional<SpeculativeConfig>();
  KASSIGN(const json j, parse_json_flag(kFlag, text));

  // Keys and types first (vLLM refuses unknown keys), in the object's (sorted) key order.
  for (const auto& [name, value] : j.items()) {
    const auto key = std::find_if(std::begin(kKeys), std::end(kKeys),
                                  [&](const Key& k) { return k.name == name; });
    if (key == std::end(kKeys)) return make_error("{}: unknown key '{}'", kFlag, name);
    if (auto err = check_type(*key, value)) return *err;
  }

  // Settings Kestrel has one value for.
  if (const auto tp = get_int(j, "draft_tensor_parallel_size"); tp && *tp != 1)
    return make_error(
        "{} draft_tensor_parallel_size={}: tensor parallelism is not supported yet (issue 20)",
        kFlag, *tp);
  if (const auto s = get_string(j, "draft_sample_method"); s && *s != "greedy") {
    if (*s == "probabilistic")
      return make_error("{} draft_sample_method=probabilistic: not supported yet (greedy)", kFlag);
    return make_error("{}: unknown draft_sample_method '{}' (greedy, probabilistic)", kFlag, *s);
  }
  if (const auto s = get_string(j, "rejection_sample_method"); s && *s != "standard") {
    if (*s == "synthetic" || *s == "block")
      return make_error("{} rejection_sample_method={}: not supported yet (standard)", kFlag, *s);
    return make_error("{}: unknown rejection_sample_method '{}' (standard, synthetic, block)",
                      kFlag, *s);
  }

  const std::optional<int64_t> k = get_int(j, "num_speculative_tokens");
  if (k && *k > kMaxSpecLen)
    return make_error("{} num_speculative_tokens={}: at most {} (vLLM's MAX_SPEC_LEN)", kFlag, *k,
                      kMaxSpecLen);

  // prompt_lookup_min/max: both default to 5; one given, the other copies it.
  std::optional<int64_t> lookup_min = get_int(j, "prompt_lookup_min");
  std::optional<int64_t> lookup_max = get_int(j, "prompt_lookup_max");
  if (!lookup_min) lookup_min = lookup_max;
  if (!lookup_max) lookup_max = lookup_min;
  if (lookup_min && *lookup_min > *lookup_max)
    return make_error("{}: prompt_lookup_min={} must be <= prompt_lookup_max={}", kFlag,
                      *lookup_min, *lookup_max);

  // The method: given, or (as vLLM) draft_model when only "model" is ("ngram"/"[ngram]": ngram).
  const std::optional<std::string> model = get_string(j, "model");
  std::optional<std::string> method = get_string(j, "method");
  if (!method && model)
    method = (*model == "ngram" || *model == "[ngram]") ? "ngram" : "draft_model";
  if (!method) {
    if (k.value_or(0) > 0)
      return make_error(
          "{}: num_speculative_tokens was provided but without speculative model (give "
          "\"method\": ngram, draft_model or mtp)",
          kFlag);
    return std::optional<SpeculativeConfig>();  // {}: speculative decoding off
  }

  SpeculativeConfig c;
  c.method_alias = *method;
  if (*method == "ngram") {
    c.method = SpeculativeMethod::kNgram;
  } else if (*method == "draft_model") {
    c.method = SpeculativeMethod::kDraftModel;
  } else if (is_mtp_name(*method)) {
    c.method = SpeculativeMethod::kMtp;
  } else if (!refusal_reason(*method)) {
    return make_error("{} method={}: unknown method (supported: {})", kFlag, *method,
                      supported_methods());
  }

  // num_speculative_tokens 0: off, as in vLLM, whatever the method.
  if (k && *k == 0) return std::optional<SpeculativeConfig>();
  if (const auto reason = refusal_reason(*method))
    return make_error("{} method={}: {}", kFlag, *method, *reason);

  if (c.method != SpeculativeMethod::kMtp && !k)
    return make_error("{} method={}: num_speculative_tokens is required (1 to {})", kFlag,
                      c.method_alias, kMaxSpecLen);
  if (c.method == SpeculativeMethod::kDraftModel) {
    if (!model || model->empty())
      return make_error("{} method=draft_model: \"model\" (the draft checkpoint) is required",
                        kFlag);
    c.draft_model = *model;
  }
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = lookup_min.value_or(5);
  c.prompt_lookup_max = lookup_max.value_or(5);
  c.disable_by_batch_size = get_int(j, "disable_by_batch_size");
  if (const auto it = j.find("enforce_eager"); it != j.end() && it->is_boolean())
    c.enforce_eager = it->get<bool>();
  return std::optional<SpeculativeConfig>(std::move(c));
}

Status resolve_speculative_config(SpeculativeConfig& c, int64_t n_predict,
                                  std::string_view model_type) {
  if (c.method != SpeculativeMethod::kMtp) return Status::Ok();
  if (n_predict <= 0)
    return make_error(
        "{} method={}: the model ({}) has no MTP layers (num_nextn_predict_layers is 0 or their "
        "weights are absent)",
        kFlag, c.method_alias, model_type);
  if (!c.num_speculative_tokens) c.num_speculative_tokens = n_predict;
  const int64_t k = *c.num_speculative_tokens;
  if (k > n_predict && k % n_predict != 0)
    return make_error(
        "{} method={}: num_speculative_tokens must be a multiple of n_predict when larger than it "
        "(num_speculative_tokens={}, n_predict={})",
        kFlag, c.method_alias, k, n_predict);
  return Status::Ok();
}

}  // namespace kestrel
