#include "server/protocol/structured_outputs.h"

#include <utility>

#include <fmt/format.h>

namespace kestrel::server {

namespace {

using nlohmann::json;
constexpr const char* kParam = "structured_outputs";

ProtocolError so_error(const std::string& message) {
  return bad_request("structured_outputs: " + message, kParam);
}

// vLLM's disable_additional_properties: an object schema that does not say otherwise admits no
// keys beyond its properties. Kestrel never writes unlisted keys when properties are listed, so
// this only narrows the schemas that list none.
void close_objects(json& schema) {
  if (!schema.is_object()) return;
  const auto type = schema.find("type");
  const bool object =
      (type != schema.end() &&
       (*type == "object" ||
        (type->is_array() && std::find(type->begin(), type->end(), "object") != type->end()))) ||
      schema.contains("properties");
  if (object && !schema.contains("additionalProperties")) schema["additionalProperties"] = false;
  for (auto& [key, value] : schema.items()) {
    if (key == "properties" || key == "$defs" || key == "definitions") {
      if (value.is_object())
        for (auto& [name, sub] : value.items()) close_objects(sub);
    } else if (key == "anyOf" || key == "oneOf" || key == "allOf") {
      if (value.is_array())
        for (auto& sub : value) close_objects(sub);
    } else if (key == "items" || key == "additionalProperties") {
      close_objects(value);
    }
  }
}

ParseResult<std::vector<std::string>> read_choices(const json& v) {
  bool ok = v.is_array() && !v.empty();
  for (size_t i = 0; ok && i < v.size(); ++i) ok = v[i].is_string();
  if (!ok) return so_error("choice must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const json& c : v) {
    if (c.get_ref<const std::string&>().empty())
      return so_error("choice must not contain an empty string");
    out.push_back(c.get<std::string>());
  }
  return out;
}

ParseResult<json> read_schema(const json& v) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      return so_error("json must be a JSON Schema object or its JSON text");
    return parsed;
  }
  return so_error("json must be a JSON Schema object or its JSON text");
}

// The constraint `structured_outputs` asks for, if any.
ParseResult<std::optional<OutputConstraint>> parse_structured_outputs(const json& so) {
  if (!so.is_object()) return so_error("must be an object");
  FieldReader r(so);
  const json* json_schema = r.get("json");
  std::optional<std::string> regex, grammar, whitespace_pattern, structural_tag;
  r.read_string("regex", regex);
  r.read_string("grammar", grammar);
  r.read_string("whitespace_pattern", whitespace_pattern);
  r.read_string("structural_tag", structural_tag);
  const json* choice = r.get("choice");
  const json* json_object = r.get("json_object");
  bool disable_any_whitespace = false, disable_additional_properties = false, unused = false;
  r.read_bool("disable_any_whitespace", disable_any_whitespace);
  r.read_bool("disable_additional_properties", disable_additional_properties);
  // Which of vLLM's backends runs the grammar, and whether it may fall back to another.
  r.read_bool("disable_fallback", unused);
  r.get("_backend");
  r.get("_backend_was_auto");
  if (r.failed()) {
    ProtocolError e = r.error();
    e.message = "structured_outputs." + e.message;
    e.param = kParam;
    return e;
  }
  if (json_object != nullptr && !json_object->is_boolean())
    return so_error("json_object must be a boolean");
  if (const auto unknown = r.unknown_keys(); !unknown.empty())
    return so_error(fmt::format("unknown field '{}'", unknown.front()));

  std::vector<std::string> kinds;
  if (json_schema) kinds.push_back("json");
  if (regex) kinds.push_back("regex");
  if (choice) kinds.push_back("choice");
  if (grammar) kinds.push_back("grammar");
  if (json_object) kinds.push_back("json_object");
  if (structural_tag) kinds.push_back("structural_tag");
  if (kinds.size() > 1)
    return so_error(fmt::format(
        "You can only use one kind of structured outputs constraint but multiple are specified: "
        "{}",
        fmt::join(kinds, ", ")));
  if (structural_tag)
    return so_error(
        "structural_tag is not supported (json, json_object, regex, choice and "
        "grammar are)");
  if (whitespace_pattern)
    return so_error("whitespace_pattern is not supported; use disable_any_whitespace");

  OutputConstraint c;
  c.param = kParam;
  c.any_whitespace = !disable_any_whitespace;
  c.closed_objects = disable_additional_properties;
  if (json_schema) {
    auto schema = read_schema(*json_schema);
    if (!schema) return schema.error();
    c.kind = OutputConstraint::Kind::kJsonSchema;
    c.schema = std::move(schema).value();
  } else if (regex) {
    c.kind = OutputConstraint::Kind::kRegex;
    c.text = std::move(*regex);
  } else if (choice) {
    auto choices = read_choices(*choice);
    if (!choices) return choices.error();
    c.kind = OutputConstraint::Kind::kChoice;
    c.choices = std::move(choices).value();
  } else if (grammar) {
    c.kind = OutputConstraint::Kind::kGrammar;
    c.text = std::move(*grammar);
  } else if (json_object) {
    c.kind = OutputConstraint::Kind::kJsonObject;
  } else {
    return std::optional<OutputConstraint>();
  }
  return std::optional(std::move(c));
}

// response_format overrides the same kind of constraint in structured_outputs and keeps its
// options.
ParseResult<std::optional<OutputConstraint>> merge_constraints(
    std::optional<OutputConstraint> from_so, const json* response_format) {
  if (response_format == nullptr) return from_so;
  // response_format has been validated: json_object, or json_schema with a json_schema object.
  OutputConstraint rf;
  rf.param = "response_format";
  const std::string type = response_format->at("type").get<std::string>();
  if (type == "structural_tag") {
    return bad_request(
        "response_format 'structural_tag' is not supported yet (json_object and json_schema are)",
        "response_format");
  } else if (type == "json_object") {
    rf.kind = OutputConstraint::Kind::kJsonObject;
  } else {
    const json& spec = response_format->at("json_schema");
    if (!spec.is_object() || !spec.contains("schema") ||
        !(spec["schema"].is_object() || spec["schema"].is_boolean()))
      return bad_request("response_format.json_schema.schema must be a JSON Schema object",
                         "response_format");
    rf.kind = OutputConstraint::Kind::kJsonSchema;
    rf.schema = spec["schema"];
  }
  if (from_so) {
    const bool same = from_so->kind == rf.kind;
    if (!same)
      return bad_request(
          "You can only use one kind of structured outputs constraint: response_format and "
          "structured_outputs ask for different ones",
          "response_format");
    rf.any_whitespace = from_so->any_whitespace;
    rf.closed_objects = from_so->closed_objects;
  }
  return std::optional(std::move(rf));
}

}  // namespace

ParseResult<std::optional<OutputConstraint>> read_output_constraint(FieldReader& reader,
                                                                    const json* response_format) {
  std::optional<OutputConstraint> from_so;
  if (const json* so = reader.get("structured_outputs")) {
    auto parsed = parse_structured_outputs(*so);
    if (!parsed) return parsed.error();
    from_so = std::move(parsed).value();
  }
  auto merged = merge_constraints(std::move(from_so), response_format);
  if (merged && merged.value() && merged.value()->closed_objects)
    close_objects(merged.value()->schema);
  return merged;
}

}  // namespace kestrel::server
