// server/protocol/field_reader.h — typed reads of request-body fields with pydantic-like rules:
// an absent or null field keeps its default, a present field of the wrong JSON type is a 400
// naming the field. The reader remembers every key it was asked about, so the keys nobody read
// can be reported as ignored (vLLM accepts and logs unknown fields rather than rejecting them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

// The integer a JSON number holds, when it holds one in int64 range (pydantic also accepts
// integral floats such as 16.0 for int fields). Booleans are not numbers here.
std::optional<int64_t> json_to_int64(const nlohmann::json& value);

// Token ids are int32 in Kestrel; ids must be in [0, INT32_MAX].
std::optional<int32_t> json_to_token_id(const nlohmann::json& value);

class FieldReader {
 public:
  // `object` must be a JSON object and outlive the reader.
  explicit FieldReader(const nlohmann::json& object) : object_(object) {}

  // The value of `key` if present and not null. Marks `key` as known either way.
  const nlohmann::json* get(std::string_view key);

  void read_bool(std::string_view key, bool& out);
  void read_number(std::string_view key, std::optional<double>& out);
  void read_int(std::string_view key, int64_t& out);
  void read_int(std::string_view key, std::optional<int64_t>& out);
  void read_string(std::string_view key, std::optional<std::string>& out);
  // A JSON object kept as raw data.
  void read_object(std::string_view key, std::optional<nlohmann::json>& out);

  // Records `error` unless an earlier one is already recorded; later reads become no-ops.
  void fail(ProtocolError error);
  bool failed() const { return error_.has_value(); }
  const ProtocolError& error() const { return *error_; }

  // Keys of the object that no read asked about, in the object's order.
  std::vector<std::string> unknown_keys() const;

 private:
  const nlohmann::json* get_typed(std::string_view key, bool type_ok(const nlohmann::json&),
                                  std::string_view type_name);

  const nlohmann::json& object_;
  std::vector<std::string> known_;
  std::optional<ProtocolError> error_;
};

// 400 "<key> must be <type_name>" with param = key.
ProtocolError type_error(std::string_view key, std::string_view type_name);

}  // namespace kestrel::server
