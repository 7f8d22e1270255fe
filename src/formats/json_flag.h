// formats/json_flag.h — a command-line flag whose value is a JSON object (vLLM's
// --speculative-config,
// --kv-transfer-config, ...): parsed once, with one error text for every such flag.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "base/status.h"

namespace kestrel {

// The flag's text as a JSON object, or "<flag>: not a JSON object: <why>" (nlohmann's position
// and reason without its exception tag; or the type found).
inline Expected<nlohmann::json> parse_json_flag(std::string_view flag, std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string_view what = e.what();
    const size_t tag = what.find("] ");
    if (what.starts_with('[') && tag != std::string_view::npos) what.remove_prefix(tag + 2);
    return make_error("{}: not a JSON object: {}", flag, what);
  }
  if (!j.is_object()) return make_error("{}: not a JSON object: found {}", flag, j.type_name());
  return j;
}

}  // namespace kestrel
