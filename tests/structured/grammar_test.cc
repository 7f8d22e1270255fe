// Schema compilation: unsupported or contradictory schemas are refused with a message naming
// the problem; supported ones compile.
#include "structured/grammar.h"

#include <string>

#include <gtest/gtest.h>

namespace kestrel::structured {
namespace {

std::string compile_error(const char* schema) {
  auto g = compile_json_schema(nlohmann::ordered_json::parse(schema));
  return g.ok() ? std::string("<compiled>") : g.error().message;
}

TEST(CompileJsonSchema, RefusesWhatItCannotEnforce) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a"})", "pattern"},
      {R"({"type": "integer", "minimum": 0})", "minimum"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "tuple"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"$ref": "http://example.com/s.json"})", "only references inside"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b'"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems > maxItems"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})", "minLength > maxLength"},
      {R"({"type": "string", "maxLength": -1})", "maxLength"},
      {R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", "recursion"},
      {R"({"enum": []})", "enum"},
      {R"({"anyOf": []})", "anyOf"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "allOf"},
      {R"({"type": "date"})", "date"},
      {R"({"type": "string", "anyOf": [{"maxLength": 3}]})", "anyOf"},
      {R"(false)", "false"},
      {R"(3)", "schema must be"},
  };
  for (const auto& [schema, needle] : cases) {
    const std::string message = compile_error(schema);
    EXPECT_NE(message.find(needle), std::string::npos) << schema << " -> " << message;
  }
}

TEST(CompileJsonSchema, AcceptsAnnotationsAndCommonShapes) {
  const char* schemas[] = {
      R"({"title": "T", "description": "d", "type": "object", "properties": {
          "when": {"type": "string", "format": "date-time", "default": "now"}},
          "$schema": "https://json-schema.org/draft/2020-12/schema"})",
      R"({"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}],
          "default": null, "title": "X"}}, "required": ["x"], "additionalProperties": false})",
      R"({"definitions": {"a": {"type": "string"}}, "allOf": [{"$ref": "#/definitions/a"}]})",
      R"({"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"})",
      R"(true)",
      R"({})",
  };
  for (const char* schema : schemas) EXPECT_EQ(compile_error(schema), "<compiled>") << schema;
}

}  // namespace
}  // namespace kestrel::structured
