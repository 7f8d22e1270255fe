#include "server/protocol/field_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kestrel::server {

using nlohmann::json;

std::optional<int64_t> json_to_int64(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 itself is out of range; every double below it converts exactly.
    if (!std::isfinite(d) || d != std::floor(d) || d < -0x1p63 || d >= 0x1p63) {
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<int32_t> json_to_token_id(const json& value) {
  const std::optional<int64_t> v = json_to_int64(value);
  if (!v || *v < 0 || *v > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(*v);
}

ProtocolError type_error(std::string_view key, std::string_view type_name) {
  return bad_request(fmt::format("{} must be {}", key, type_name), std::string(key));
}

const json* FieldReader::get(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  if (failed()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

const json* FieldReader::get_typed(std::string_view key, bool type_ok(const json&),
                                   std::string_view type_name) {
  const json* value = get(key);
  if (value != nullptr && !type_ok(*value)) {
    fail(type_error(key, type_name));
    return nullptr;
  }
  return value;
}

void FieldReader::read_bool(std::string_view key, bool& out) {
  const json* v = get_typed(
      key, [](const json& j) { return j.is_boolean(); }, "a boolean");
  if (v != nullptr) out = v->get<bool>();
}

void FieldReader::read_number(std::string_view key, std::optional<double>& out) {
  const json* v = get_typed(
      key, [](const json& j) { return j.is_number(); }, "a number");
  if (v == nullptr) return;
  const double d = v->get<double>();
  if (!std::isfinite(d)) {
    fail(bad_request(fmt::format("{} must be a finite number", key), std::string(key)));
    return;
  }
  out = d;
}

void FieldReader::read_int(std::string_view key, std::optional<int64_t>& out) {
  const json* v = get(key);
  if (v == nullptr) return;
  const std::optional<int64_t> i = json_to_int64(*v);
  if (!i) {
    fail(type_error(key, "an integer"));
    return;
  }
  out = *i;
}

void FieldReader::read_int(std::string_view key, int64_t& out) {
  std::optional<int64_t> v;
  read_int(key, v);
  if (v) out = *v;
}

void FieldReader::read_string(std::string_view key, std::optional<std::string>& out) {
  const json* v = get_typed(
      key, [](const json& j) { return j.is_string(); }, "a string");
  if (v != nullptr) out = v->get<std::string>();
}

void FieldReader::read_object(std::string_view key, std::optional<json>& out) {
  const json* v = get_typed(
      key, [](const json& j) { return j.is_object(); }, "an object");
  if (v != nullptr) out = *v;
}

void FieldReader::fail(ProtocolError error) {
  if (!error_) error_ = std::move(error);
}

std::vector<std::string> FieldReader::unknown_keys() const {
  std::vector<std::string> unknown;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
      unknown.push_back(it.key());
    }
  }
  return unknown;
}

}  // namespace kestrel::server
