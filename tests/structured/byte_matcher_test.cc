// The byte-level JSON matcher on hand-written documents: what each schema keyword allows, and
// the exact byte where an invalid document is refused (positions counted by hand).
#include "structured/byte_matcher.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "structured/grammar.h"

namespace kestrel::structured {
namespace {

std::shared_ptr<const Grammar> compile(std::string_view schema) {
  auto g = compile_json_schema(nlohmann::ordered_json::parse(schema));
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return g.ok() ? *g : nullptr;
}

struct Outcome {
  size_t accepted;  // bytes taken before the first refusal
  bool accepting;
  bool done;
};

Outcome run(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  ByteMatcher m(g);
  size_t i = 0;
  while (i < text.size() && m.feed(static_cast<uint8_t>(text[i]))) ++i;
  return {i, m.accepting(), m.done()};
}

void expect_valid(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  const Outcome o = run(g, text);
  EXPECT_EQ(o.accepted, text.size()) << text;
  EXPECT_TRUE(o.accepting) << text;
}

void expect_reject_at(const std::shared_ptr<const Grammar>& g, std::string_view text, size_t at) {
  EXPECT_EQ(run(g, text).accepted, at) << text;
}

void expect_incomplete(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  const Outcome o = run(g, text);
  EXPECT_EQ(o.accepted, text.size()) << text;
  EXPECT_FALSE(o.accepting) << text;
}

constexpr std::string_view kPerson =
    R"({"type": "object", "properties": {"name": {"type": "string"},
        "age": {"type": "integer"}, "nick": {"type": "string"}}, "required": ["name"]})";

TEST(ByteMatcher, ObjectPropertiesInOrder) {
  const auto g = compile(kPerson);
  expect_valid(g, R"({"name":"Bob","age":42})");
  expect_valid(g, R"({"name":"Bob"})");
  expect_valid(g, R"({"name":"Bob","nick":"b"})");
  expect_valid(g, R"({"name":"Bob","age":-3,"nick":""})");
  expect_valid(g, R"({"name":"x\"y\u00e9\\"})");
  expect_valid(g, "{\n  \"name\": \"Bob\",\n  \"age\": 42\n}");
  expect_valid(g, R"({"name" :"Bob"})");
  expect_reject_at(g, R"({"age":1})", 2);         // name is required first
  expect_reject_at(g, R"({"name":"Bob",})", 14);  // a key must follow the comma
  expect_reject_at(g, R"({"name":"Bob","age":4.5})", 21);
  expect_reject_at(g, R"({"name":"Bob","nick":"b","age":1})", 24);  // age comes before nick
  expect_reject_at(g, R"({"name":"Bob","name":"x"})", 16);          // no repeated key
  expect_reject_at(g, R"({"name"  :"Bob"})", 8);                    // one space at most
  expect_reject_at(g, "{\"name\":\"a\nb\"}", 10);                   // raw control byte
  expect_incomplete(g, R"({"name":"Bob")");
  expect_incomplete(g, R"({)");
}

TEST(ByteMatcher, NothingFollowsTheDocument) {
  const auto g = compile(kPerson);
  const Outcome o = run(g, R"({"name":"Bob"})");
  EXPECT_TRUE(o.done);
  expect_reject_at(g, R"({"name":"Bob"}x)", 14);
  expect_reject_at(g, R"({"name":"Bob"} )", 14);
  expect_valid(g, R"( {"name":"Bob"})");  // one leading space is allowed
}

TEST(ByteMatcher, ListedOrderOrSortedOrder) {
  constexpr std::string_view schema =
      R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}})";
  const auto ordered = compile(schema);
  expect_valid(ordered, R"({"b":1,"a":2})");
  expect_valid(ordered, R"({"a":2})");
  expect_valid(ordered, R"({})");
  expect_reject_at(ordered, R"({"a":1,"b":2})", 6);
  auto sorted = compile_json_schema(nlohmann::json::parse(schema));
  ASSERT_TRUE(sorted.ok());
  expect_valid(*sorted, R"({"a":1,"b":2})");
  expect_reject_at(*sorted, R"({"b":1,"a":2})", 6);
}

TEST(ByteMatcher, StringLengthsAndEscapes) {
  const auto g = compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  expect_valid(g, R"("ab")");
  expect_valid(g, R"("abc")");
  expect_valid(g, "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"");  // é € 😀: three code points
  expect_valid(g, R"("\u00e9x")");
  expect_valid(g, R"("\n\t\/")");
  expect_valid(g, R"("\uD7FFa")");
  expect_reject_at(g, R"("abcd")", 4);
  expect_reject_at(g, R"("a")", 2);
  expect_reject_at(g, R"("\qa")", 2);
  expect_reject_at(g, R"("\ud800a")", 4);  // lone surrogate
  expect_reject_at(g, R"("\uDBFFa")", 4);
  expect_reject_at(g, R"("\u12g4")", 5);
  expect_reject_at(g, "\"a\x01\"", 2);
  expect_reject_at(g, "\"\xC0\xAF\"", 1);      // overlong lead byte
  expect_reject_at(g, "\"\xED\xA0\x80\"", 2);  // UTF-8 surrogate
  expect_reject_at(g, "\"\xF4\x90\x80\x80\"", 2);
  expect_reject_at(g, "\"a\xE2\x82\"", 4);  // quote inside a character
  expect_reject_at(g, "\"ab\x80\"", 3);     // stray continuation byte
  expect_incomplete(g, R"("ab)");
}

TEST(ByteMatcher, Numbers) {
  const auto number = compile(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "12.5e+3", "1E9", "-0.001", "7e-2", "10"}) {
    expect_valid(number, ok);
    EXPECT_FALSE(run(number, ok).done) << ok;  // more digits could follow
  }
  expect_reject_at(number, "01", 1);
  expect_reject_at(number, ".5", 0);
  expect_reject_at(number, "+1", 0);
  expect_reject_at(number, "1.5e3.2", 5);
  expect_reject_at(number, "1.e3", 2);
  expect_incomplete(number, "1.");
  expect_incomplete(number, "-");
  expect_incomplete(number, "1e+");
  expect_valid(number, std::string(kMaxIntDigits, '9'));
  expect_reject_at(number, std::string(kMaxIntDigits + 1, '9'), kMaxIntDigits);
  expect_reject_at(number, "1e123", 4);

  const auto integer = compile(R"({"type": "integer"})");
  expect_valid(integer, "-7");
  expect_reject_at(integer, "1.5", 1);
  expect_reject_at(integer, "1e5", 1);
}

TEST(ByteMatcher, Arrays) {
  const auto g =
      compile(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})");
  expect_valid(g, "[1]");
  expect_valid(g, "[1, 2]");
  expect_valid(g, "[\n  1,\n  2\n]");
  expect_reject_at(g, "[]", 1);
  expect_reject_at(g, "[ ]", 2);
  expect_reject_at(g, "[1,2,3]", 4);
  expect_reject_at(g, "[1,]", 3);
  const auto empty = compile(R"({"type": "array", "maxItems": 0})");
  expect_valid(empty, "[]");
  expect_reject_at(empty, "[1]", 1);
}

TEST(ByteMatcher, EnumAndConst) {
  const auto g = compile(R"({"enum": ["red", "green", 1, 12, null, {"k": [1, 2]}]})");
  expect_valid(g, R"("red")");
  expect_valid(g, R"("green")");
  expect_valid(g, "null");
  expect_valid(g, "1");
  expect_valid(g, "12");
  expect_valid(g, R"({"k":[1,2]})");
  EXPECT_FALSE(run(g, "1").done);
  EXPECT_TRUE(run(g, "12").done);
  expect_reject_at(g, R"("re")", 3);
  expect_reject_at(g, "13", 1);
  expect_reject_at(g, R"({"k": [1,2]})", 5);  // literals are matched in compact form
  expect_reject_at(g, "true", 0);
  const auto c = compile(R"({"const": "get_weather"})");
  expect_valid(c, R"("get_weather")");
  expect_reject_at(c, R"("get_time")", 5);
  const auto b = compile(R"({"type": "boolean"})");
  expect_valid(b, "true");
  expect_valid(b, "false");
  expect_reject_at(b, "null", 0);
}

TEST(ByteMatcher, AnyOfKeepsAlternativesUntilTheyDiffer) {
  const auto g = compile(R"({"anyOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"type": "object", "properties": {"ab": {"type": "string"}}, "required": ["ab"]},
      {"type": "null"}]})");
  expect_valid(g, R"({"a":1})");
  expect_valid(g, R"({"ab":"x"})");
  expect_valid(g, "null");
  expect_reject_at(g, R"({"c":1})", 2);
  expect_reject_at(g, R"({"a":"x"})", 5);
  expect_reject_at(g, R"({"ab":1})", 6);
  const auto nullable = compile(R"({"type": ["string", "null"]})");
  expect_valid(nullable, R"("x")");
  expect_valid(nullable, "null");
  expect_reject_at(nullable, "1", 0);
}

TEST(ByteMatcher, RecursiveReference) {
  const auto g = compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}, "$ref": "#/$defs/node"})");
  expect_valid(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})");
  expect_reject_at(g, R"({"kids":[]})", 2);
  expect_reject_at(g, R"({"v":1,"kids":[{"v":2,"kids":[{"x":1}]}]})", 32);
}

TEST(ByteMatcher, FreeObjects) {
  const auto any = json_object_grammar();
  expect_valid(any, R"({"a":[1,{"b":null}],"c":"x","d":true,"e":-1.5e3,"a":[]})");
  expect_valid(any, "{}");
  const nlohmann::json doc = {
      {"list", {1, 2, {{"deep", {{"x", "y"}}}}}}, {"s", "t"}, {"n", nullptr}};
  expect_valid(any, doc.dump(2));
  expect_valid(any, doc.dump(4));
  expect_reject_at(any, "[1]", 0);
  expect_reject_at(any, "\"x\"", 0);
  expect_reject_at(any, R"({"a":tru})", 8);
  expect_reject_at(any, R"({a:1})", 1);

  const auto map = compile(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  expect_valid(map, R"({"x":1,"y":2})");
  expect_reject_at(map, R"({"x":"s"})", 5);
  const auto closed = compile(R"({"type": "object", "additionalProperties": false})");
  expect_valid(closed, "{}");
  expect_reject_at(closed, R"({"x":1})", 1);
}

TEST(ByteMatcher, NestingIsBounded) {
  const auto any = json_object_grammar();
  // The root frame plus one frame per object; a container needs room for a child frame.
  const int max_objects = kMaxDepth - 2;
  std::string open;
  for (int i = 0; i < max_objects; ++i) open += R"({"a":)";
  expect_valid(any, open + "1" + std::string(max_objects, '}'));
  expect_reject_at(any, open + R"({"a":1)", open.size());
}

TEST(ByteMatcher, WhitespaceIsBounded) {
  const auto any = json_object_grammar();
  expect_valid(any, "{\n\t\"a\": 1\n}");
  const std::string indent(kMaxIndent, ' ');
  expect_valid(any, "{\n" + indent + "\"a\":1}");
  expect_reject_at(any, "{\n" + indent + " \"a\":1}", 2 + kMaxIndent);
  expect_reject_at(any, "{ \n\"a\":1}", 2);
  expect_reject_at(any, "{\n\n\"a\":1}", 2);
  expect_reject_at(any, R"({"a":1  , "b":2})", 7);
  expect_valid(any, R"({"a":1 , "b":2})");
}

// disable_any_whitespace: the same grammar with json_whitespace off admits no whitespace at all
// between tokens, while strings keep their spaces.
TEST(ByteMatcher, CompactJsonHasNoWhitespace) {
  auto compact = std::make_shared<Grammar>(*json_object_grammar());
  compact->json_whitespace = false;
  expect_valid(compact, R"({"a":[1,2],"b":"x y"})");
  expect_reject_at(compact, R"({"a": 1})", 5);
  expect_reject_at(compact, R"({"a":[1, 2]})", 8);
  expect_reject_at(compact, " {}", 0);
  expect_reject_at(compact, "{\n}", 1);
}

TEST(PlainStringChars, CountsCodePoints) {
  EXPECT_EQ(plain_string_chars("abc"), 3);
  EXPECT_EQ(plain_string_chars(" \xC3\xA9t\xC3\xA9"), 4);
  EXPECT_EQ(plain_string_chars("\\n\\u00e9"), 2);
  EXPECT_EQ(plain_string_chars("a\""), std::nullopt);
  EXPECT_EQ(plain_string_chars("\\"), std::nullopt);        // escape left open
  EXPECT_EQ(plain_string_chars("\xE2\x82"), std::nullopt);  // character left open
  EXPECT_EQ(plain_string_chars("\n"), std::nullopt);
  EXPECT_EQ(plain_string_chars(""), 0);
}

}  // namespace
}  // namespace kestrel::structured
