#include "server/protocol/sampling_fields.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace kestrel::server {

using nlohmann::json;

namespace {

// vLLM treats temperatures below this as greedy.
constexpr double kGreedyEpsilon = 1e-5;

void read_stop(FieldReader& reader, std::vector<std::string>& out) {
  const json* v = reader.get("stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    out = {v->get<std::string>()};
    return;
  }
  const bool all_strings = v->is_array() && std::all_of(v->begin(), v->end(), [](const json& s) {
                             return s.is_string();
                           });
  if (!all_strings) {
    reader.fail(type_error("stop", "a string or an array of strings"));
    return;
  }
  out.clear();
  for (const json& s : *v) out.push_back(s.get<std::string>());
}

void read_stop_token_ids(FieldReader& reader, std::vector<int32_t>& out) {
  const json* v = reader.get("stop_token_ids");
  if (v == nullptr) return;
  if (!v->is_array()) {
    reader.fail(type_error("stop_token_ids", "an array of token ids"));
    return;
  }
  out.clear();
  for (const json& item : *v) {
    const std::optional<int32_t> id = json_to_token_id(item);
    if (!id) {
      reader.fail(type_error("stop_token_ids", "an array of non-negative integer token ids"));
      return;
    }
    if (std::find(out.begin(), out.end(), *id) == out.end()) out.push_back(*id);
  }
}

void read_stream_options(FieldReader& reader, std::optional<StreamOptions>& out) {
  const json* v = reader.get("stream_options");
  if (v == nullptr) return;
  if (!v->is_object()) {
    reader.fail(type_error("stream_options", "an object"));
    return;
  }
  // An empty object is falsy in vLLM's check and changes nothing.
  if (v->empty()) return;
  StreamOptions options;
  FieldReader inner(*v);
  inner.read_bool("include_usage", options.include_usage);
  inner.read_bool("continuous_usage_stats", options.continuous_usage_stats);
  if (inner.failed()) {
    ProtocolError error = inner.error();
    error.message = "stream_options." + error.message;
    error.param = "stream_options";
    reader.fail(std::move(error));
    return;
  }
  out = options;
}

void read_response_format(FieldReader& reader, std::optional<ResponseFormat>& out) {
  const json* v = reader.get("response_format");
  if (v == nullptr) return;
  if (!v->is_object()) {
    reader.fail(type_error("response_format", "an object"));
    return;
  }
  const auto type = v->find("type");
  if (type == v->end() || !type->is_string()) {
    reader.fail(bad_request("response_format.type must be a string", "response_format"));
    return;
  }
  ResponseFormat format{type->get<std::string>(), *v};
  if (format.type != "text" && format.type != "json_object" && format.type != "json_schema" &&
      format.type != "structural_tag") {
    reader.fail(bad_request(fmt::format("response_format.type must be one of 'text', "
                                        "'json_object', 'json_schema' or 'structural_tag', got "
                                        "'{}'",
                                        format.type),
                            "response_format"));
    return;
  }
  if (format.type == "json_schema") {
    const auto schema = v->find("json_schema");
    if (schema == v->end() || schema->is_null()) {
      reader.fail(
          bad_request("When response_format type is 'json_schema', the 'json_schema' "
                      "field must be provided.",
                      "response_format"));
      return;
    }
  }
  out = std::move(format);
}

// OpenAI's logit_bias: {"<token id>": bias}; biases are clamped to [-100, 100] as vLLM does.
void read_logit_bias(FieldReader& reader, std::vector<std::pair<int64_t, double>>& out) {
  const json* v = reader.get("logit_bias");
  if (v == nullptr) return;
  if (!v->is_object()) return reader.fail(type_error("logit_bias", "an object"));
  for (const auto& [key, bias] : v->items()) {
    // Python's int(): optional surrounding whitespace and sign, then digits.
    const size_t b = key.find_first_not_of(" \t");
    const size_t e = key.find_last_not_of(" \t");
    std::string digits = b == std::string::npos ? "" : key.substr(b, e - b + 1);
    const bool negative = !digits.empty() && digits[0] == '-';
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.erase(0, 1);
    const bool numeric =
        !digits.empty() && digits.size() <= 18 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!numeric)
      return reader.fail(bad_request(
          fmt::format("logit_bias keys must be token ids, got '{}'", key), "logit_bias"));
    if (!bias.is_number())
      return reader.fail(
          bad_request(fmt::format("logit_bias['{}'] must be a number", key), "logit_bias"));
    const int64_t id = std::stoll(digits) * (negative ? -1 : 1);
    out.emplace_back(id, std::clamp(bias.get<double>(), -100.0, 100.0));
  }
}

void read_allowed_token_ids(FieldReader& reader, std::optional<std::vector<int64_t>>& out) {
  const json* v = reader.get("allowed_token_ids");
  if (v == nullptr) return;
  if (!v->is_array()) return reader.fail(type_error("allowed_token_ids", "an array of token ids"));
  std::vector<int64_t> ids;
  for (const json& item : *v) {
    const std::optional<int64_t> id = json_to_int64(item);
    if (!id) return reader.fail(type_error("allowed_token_ids", "an array of token ids"));
    ids.push_back(*id);
  }
  if (ids.empty())
    return reader.fail(
        bad_request("allowed_token_ids is not None and empty!", "allowed_token_ids"));
  out = std::move(ids);
}

void read_bad_words(FieldReader& reader, std::vector<std::string>& out) {
  const json* v = reader.get("bad_words");
  if (v == nullptr) return;
  const bool all_strings = v->is_array() && std::all_of(v->begin(), v->end(), [](const json& s) {
                             return s.is_string();
                           });
  if (!all_strings) return reader.fail(type_error("bad_words", "an array of strings"));
  out.clear();
  for (const json& s : *v) out.push_back(s.get<std::string>());
}

// truncate_prompt_tokens (>= -1) and truncation_side ("left" or "right").
void read_truncation(FieldReader& reader, SamplingFields& out) {
  reader.read_int("truncate_prompt_tokens", out.truncate_prompt_tokens);
  std::optional<std::string> side;
  reader.read_string("truncation_side", side);
  if (reader.failed()) return;
  if (out.truncate_prompt_tokens && *out.truncate_prompt_tokens < -1)
    return reader.fail(
        bad_request(fmt::format("truncate_prompt_tokens must be -1 or non-negative, got {}.",
                                *out.truncate_prompt_tokens),
                    "truncate_prompt_tokens"));
  if (side && *side != "left" && *side != "right")
    return reader.fail(bad_request("truncation_side must be 'left' or 'right'", "truncation_side"));
  if (side) out.truncate_left = *side == "left";
}

// vLLM's check of cache_salt: a non-empty string of at most 128 characters without '@', '/', a
// backslash or NUL.
void read_cache_salt(FieldReader& reader, std::optional<std::string>& out) {
  const json* v = reader.get("cache_salt");
  if (v == nullptr) return;
  const bool ok =
      v->is_string() && !v->get_ref<const std::string&>().empty() &&
      v->get_ref<const std::string&>().size() <= 128 &&
      v->get_ref<const std::string&>().find_first_of(std::string("@/\\\0", 4)) == std::string::npos;
  if (!ok)
    return reader.fail(bad_request(
        "Parameter 'cache_salt' must be a non-empty string of at most 128 characters and must "
        "not contain '@', '/', '\\\\', or NUL.",
        "cache_salt"));
  out = v->get<std::string>();
}

ProtocolError range_error(std::string_view key, std::string_view rule, double value) {
  return bad_request(fmt::format("{} must be {}, got {}.", key, rule, value), std::string(key));
}

}  // namespace

void read_sampling_fields(FieldReader& reader, SamplingFields& out) {
  reader.read_number("temperature", out.temperature);
  reader.read_number("top_p", out.top_p);
  reader.read_int("top_k", out.top_k);
  reader.read_number("min_p", out.min_p);
  reader.read_number("presence_penalty", out.presence_penalty);
  reader.read_number("frequency_penalty", out.frequency_penalty);
  reader.read_number("repetition_penalty", out.repetition_penalty);
  reader.read_int("seed", out.seed);
  read_stop(reader, out.stop);
  read_stop_token_ids(reader, out.stop_token_ids);
  reader.read_bool("ignore_eos", out.ignore_eos);
  reader.read_int("min_tokens", out.min_tokens);
  reader.read_bool("include_stop_str_in_output", out.include_stop_str_in_output);
  reader.read_bool("skip_special_tokens", out.skip_special_tokens);
  reader.read_bool("spaces_between_special_tokens", out.spaces_between_special_tokens);
  reader.read_int("n", out.n);
  reader.read_int("prompt_logprobs", out.prompt_logprobs);
  reader.read_bool("stream", out.stream);
  read_stream_options(reader, out.stream_options);
  read_response_format(reader, out.response_format);
  {
    const json* rf = out.response_format && out.response_format->constrains_output()
                         ? &out.response_format->spec
                         : nullptr;
    auto constraint = read_output_constraint(reader, rf);
    if (!constraint) {
      reader.fail(constraint.error());
    } else {
      out.constraint = std::move(constraint).value();
    }
  }
  read_logit_bias(reader, out.logit_bias);
  read_allowed_token_ids(reader, out.allowed_token_ids);
  read_bad_words(reader, out.bad_words);
  read_truncation(reader, out);
  reader.read_bool("return_tokens_as_token_ids", out.return_tokens_as_token_ids);
  read_cache_salt(reader, out.cache_salt);
  reader.read_string("user", out.user);
  reader.read_int("priority", out.priority);
  reader.read_string("request_id", out.request_id);
  reader.read_object("kv_transfer_params", out.kv_transfer_params);

  if (out.top_k == -1) out.top_k = 0;  // vLLM quietly accepts -1 as "off"
  if (out.seed == -1) out.seed.reset();
}

std::optional<ProtocolError> check_logprobs_count(std::string_view key, int64_t value) {
  if (value < 0 || value > kMaxLogprobs) {
    return bad_request(
        fmt::format("{} must be between 0 and {}, got {}.", key, kMaxLogprobs, value),
        std::string(key));
  }
  return std::nullopt;
}

std::optional<ProtocolError> validate_sampling_fields(const SamplingFields& f) {
  if (f.temperature && *f.temperature < 0.0) {
    return range_error("temperature", "non-negative", *f.temperature);
  }
  if (f.top_p && !(*f.top_p > 0.0 && *f.top_p <= 1.0)) {
    return range_error("top_p", "in (0, 1]", *f.top_p);
  }
  if (f.top_k && *f.top_k < 0) {
    return bad_request(fmt::format("top_k must be 0 (disable), or at least 1, got {}.", *f.top_k),
                       "top_k");
  }
  if (f.min_p && !(*f.min_p >= 0.0 && *f.min_p <= 1.0)) {
    return range_error("min_p", "in [0, 1]", *f.min_p);
  }
  if (f.presence_penalty && !(*f.presence_penalty >= -2.0 && *f.presence_penalty <= 2.0)) {
    return range_error("presence_penalty", "in [-2, 2]", *f.presence_penalty);
  }
  if (f.frequency_penalty && !(*f.frequency_penalty >= -2.0 && *f.frequency_penalty <= 2.0)) {
    return range_error("frequency_penalty", "in [-2, 2]", *f.frequency_penalty);
  }
  if (f.repetition_penalty && !(*f.repetition_penalty > 0.0)) {
    return range_error("repetition_penalty", "greater than zero", *f.repetition_penalty);
  }
  if (f.n < 1) return bad_request(fmt::format("n must be at least 1, got {}.", f.n), "n");
  if (f.n > kMaxN) {
    return bad_request(fmt::format("n must be at most {}, got {}.", kMaxN, f.n), "n");
  }
  if (f.temperature && *f.temperature < kGreedyEpsilon && f.n > 1) {
    return bad_request(fmt::format("n must be 1 when using greedy sampling, got {}.", f.n), "n");
  }
  if (std::any_of(f.stop.begin(), f.stop.end(), [](const std::string& s) { return s.empty(); })) {
    return bad_request("stop cannot contain an empty string.", "stop");
  }
  if (f.min_tokens < 0) {
    return bad_request(
        fmt::format("min_tokens must be greater than or equal to 0, got {}.", f.min_tokens),
        "min_tokens");
  }
  if (f.max_tokens && f.min_tokens > *f.max_tokens) {
    return bad_request(
        fmt::format("min_tokens must be less than or equal to max_tokens={}, got {}.",
                    *f.max_tokens, f.min_tokens),
        "min_tokens");
  }
  if (f.logprobs) {
    if (auto e = check_logprobs_count("logprobs", *f.logprobs)) return e;
  }
  if (f.prompt_logprobs) {
    if (auto e = check_logprobs_count("prompt_logprobs", *f.prompt_logprobs)) return e;
    if (f.stream && *f.prompt_logprobs > 0) {
      return bad_request("`prompt_logprobs` are not available when `stream=True`.",
                         "prompt_logprobs");
    }
  }
  if (f.stream_options && !f.stream) {
    return bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
  }
  return std::nullopt;
}

SamplingValues resolve_sampling_values(const SamplingFields& f, const SamplingValues& defaults) {
  SamplingValues v;
  v.temperature = f.temperature.value_or(defaults.temperature);
  v.top_p = f.top_p.value_or(defaults.top_p);
  v.top_k = f.top_k.value_or(defaults.top_k);
  v.min_p = f.min_p.value_or(defaults.min_p);
  v.presence_penalty = f.presence_penalty.value_or(defaults.presence_penalty);
  v.frequency_penalty = f.frequency_penalty.value_or(defaults.frequency_penalty);
  v.repetition_penalty = f.repetition_penalty.value_or(defaults.repetition_penalty);
  return v;
}

}  // namespace kestrel::server
