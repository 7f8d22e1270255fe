// server/protocol/structured_outputs.h — the one constraint a request puts on its output, from
// vLLM's `structured_outputs` field (json, json_object, regex, choice, grammar) and OpenAI's
// `response_format` (json_object, json_schema), merged as vLLM merges them: response_format
// overrides the same kind in structured_outputs, and two different kinds are a 400.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/field_reader.h"
#include "server/protocol/protocol_error.h"

namespace kestrel::server {

struct OutputConstraint {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  nlohmann::json schema;             // kJsonSchema
  std::string text;                  // kRegex: the pattern; kGrammar: the EBNF text
  std::vector<std::string> choices;  // kChoice
  bool any_whitespace = true;        // false: JSON without whitespace between tokens
  bool closed_objects = false;       // schema objects admit no unlisted keys (already applied)
  std::string param;                 // the field it came from, for 400s
};

// Reads `structured_outputs` (an object; `json` may be a schema object or its JSON text) and
// merges it with an already read `response_format` object (null when absent or "text"). An
// empty structured_outputs object asks for nothing.
ParseResult<std::optional<OutputConstraint>> read_output_constraint(
    FieldReader& reader, const nlohmann::json* response_format);

}  // namespace kestrel::server
