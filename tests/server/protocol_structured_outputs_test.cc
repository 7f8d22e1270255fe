// structured_outputs and response_format merged into one output constraint, as vLLM merges them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;
using Kind = OutputConstraint::Kind;

ParseResult<CompletionRequest> with_so(const json& so, const json* rf = nullptr) {
  json body = {{"prompt", "hello"}, {"structured_outputs", so}};
  if (rf != nullptr) body["response_format"] = *rf;
  return parse_completion_request(body);
}

TEST(ProtocolStructuredOutputs, EachKind) {
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  auto r = with_so({{"json", schema}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r.value().sampling.constraint);
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kJsonSchema);
  EXPECT_EQ(r.value().sampling.constraint->schema, schema);
  EXPECT_EQ(r.value().sampling.constraint->param, "structured_outputs");

  r = with_so({{"json", schema.dump()}});  // the schema as JSON text
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.constraint->schema, schema);

  r = with_so({{"regex", "[a-z]+"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kRegex);
  EXPECT_EQ(r.value().sampling.constraint->text, "[a-z]+");

  r = with_so({{"choice", {"yes", "no"}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kChoice);
  EXPECT_EQ(r.value().sampling.constraint->choices, (std::vector<std::string>{"yes", "no"}));

  r = with_so({{"grammar", "root ::= \"a\""}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kGrammar);

  r = with_so({{"json_object", true}, {"disable_any_whitespace", true}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kJsonObject);
  EXPECT_FALSE(r.value().sampling.constraint->any_whitespace);

  r = with_so(json::object());  // nothing asked
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().sampling.constraint);
}

TEST(ProtocolStructuredOutputs, OneKindOnly) {
  expect_bad_request(with_so({{"regex", "a"}, {"choice", {"a"}}}), "structured_outputs",
                     "multiple are specified: regex, choice");
  const json rf = {{"type", "json_object"}};
  expect_bad_request(with_so({{"regex", "a"}}, &rf), "response_format", "one kind");
}

TEST(ProtocolStructuredOutputs, ResponseFormatOverridesTheSameKind) {
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "x"}, {"schema", {{"type", "integer"}}}}}};
  const auto r = with_so({{"json", {{"type", "string"}}}, {"disable_any_whitespace", true}}, &rf);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().sampling.constraint->schema, (json{{"type", "integer"}}));
  EXPECT_EQ(r.value().sampling.constraint->param, "response_format");
  EXPECT_FALSE(r.value().sampling.constraint->any_whitespace);
}

TEST(ProtocolStructuredOutputs, DisableAdditionalPropertiesClosesObjects) {
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"inner", {{"type", "object"}}},
                         {"open", {{"type", "object"}, {"additionalProperties", true}}}}}};
  const auto r = with_so({{"json", schema}, {"disable_additional_properties", true}});
  ASSERT_TRUE(r.ok());
  const json& s = r.value().sampling.constraint->schema;
  EXPECT_EQ(s["additionalProperties"], false);
  EXPECT_EQ(s["properties"]["inner"]["additionalProperties"], false);
  EXPECT_EQ(s["properties"]["open"]["additionalProperties"], true);
}

TEST(ProtocolStructuredOutputs, Errors) {
  expect_bad_request(with_so("regex"), "structured_outputs", "must be an object");
  expect_bad_request(with_so({{"choice", json::array()}}), "structured_outputs",
                     "non-empty array of strings");
  expect_bad_request(with_so({{"choice", {"a", ""}}}), "structured_outputs", "empty string");
  expect_bad_request(with_so({{"json", "{not json"}}), "structured_outputs", "JSON Schema");
  expect_bad_request(with_so({{"regex", 5}}), "structured_outputs", "regex must be a string");
  expect_bad_request(with_so({{"structural_tag", "{}"}}), "structured_outputs",
                     "structural_tag is not supported");
  expect_bad_request(with_so({{"whitespace_pattern", " *"}, {"json_object", true}}),
                     "structured_outputs", "whitespace_pattern");
  expect_bad_request(with_so({{"regexp", "a"}}), "structured_outputs", "unknown field 'regexp'");
}

TEST(ProtocolStructuredOutputs, ChatReadsItToo) {
  const auto r = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                     {"structured_outputs", {{"choice", {"a", "b"}}}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r.value().sampling.constraint);
  EXPECT_EQ(r.value().sampling.constraint->kind, Kind::kChoice);
}

}  // namespace
}  // namespace kestrel::server
