// Tool-call parsers: model-style outputs of every family, text the real chat templates render
// for assistant tool calls read back, malformed calls kept as content, and the streaming
// invariant — any way of cutting the text into pieces streams what parse() returns.
#include "chat/tool_parsers/tool_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

struct ExpectedCall {
  std::string name;
  json arguments;
};

std::vector<ToolSpec> weather_tools() {
  return {
      {"get_weather", json::parse(R"({"type": "object", "properties": {
          "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
          "days": {"type": "integer"}}, "required": ["city"]})")},
      {"get_time", json::parse(R"({"type": "object", "properties": {
          "timezone": {"type": "string"}}})")},
      {"search_code", json::parse(R"({"type": "object", "properties": {
          "query": {"type": "string"}, "limit": {"type": "integer"}}})")},
  };
}

std::unique_ptr<ToolParser> parser(std::string_view name, std::vector<ToolSpec> tools) {
  auto p = make_tool_parser(name, std::move(tools));
  EXPECT_NE(p, nullptr) << name;
  return p;
}

json parse_arguments(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  EXPECT_TRUE(j.is_object()) << "arguments are not a JSON object: " << text;
  return j;
}

void expect_ids(const std::vector<ToolCall>& calls) {
  static const std::regex kId("call_[A-Za-z0-9]{24}");
  std::set<std::string> seen;
  for (const ToolCall& c : calls) {
    EXPECT_TRUE(std::regex_match(c.id, kId)) << c.id;
    EXPECT_TRUE(seen.insert(c.id).second) << "duplicate id " << c.id;
  }
}

void expect_message(const ParsedMessage& m, const std::string& content,
                    const std::vector<ExpectedCall>& calls) {
  EXPECT_EQ(m.content, content);
  ASSERT_EQ(m.tool_calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, calls[i].name) << "call " << i;
    EXPECT_EQ(parse_arguments(m.tool_calls[i].arguments), calls[i].arguments) << "call " << i;
  }
  expect_ids(m.tool_calls);
}

// What an OpenAI client assembles from the stream; the delta protocol is checked on the way.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
};

void take(const ToolStreamDelta& d, Streamed& out) {
  out.content += d.content;
  for (const ToolCallDelta& c : d.tool_calls) {
    if (c.index == static_cast<int>(out.calls.size())) {
      ASSERT_TRUE(c.id.has_value()) << "first delta of call " << c.index << " has no id";
      ASSERT_TRUE(c.name.has_value()) << "first delta of call " << c.index << " has no name";
      out.calls.push_back({*c.id, *c.name, c.arguments});
    } else {
      ASSERT_GE(c.index, 0);
      ASSERT_LT(c.index, static_cast<int>(out.calls.size())) << "indices must come in order";
      EXPECT_FALSE(c.id.has_value()) << "a later delta repeats the id";
      EXPECT_FALSE(c.name.has_value()) << "a later delta repeats the name";
      out.calls[c.index].arguments += c.arguments;
    }
  }
}

Streamed stream(ToolParser& p, const std::vector<std::string_view>& pieces) {
  Streamed out;
  for (std::string_view piece : pieces) take(p.feed(piece), out);
  take(p.finish(), out);
  return out;
}

void expect_same(const Streamed& s, const ParsedMessage& m, const std::string& how) {
  EXPECT_EQ(s.content, m.content) << how;
  ASSERT_EQ(s.calls.size(), m.tool_calls.size()) << how;
  for (size_t i = 0; i < s.calls.size(); ++i) {
    EXPECT_EQ(s.calls[i].name, m.tool_calls[i].name) << how << ", call " << i;
    EXPECT_EQ(parse_arguments(s.calls[i].arguments), parse_arguments(m.tool_calls[i].arguments))
        << how << ", call " << i;
  }
  expect_ids(s.calls);
}

// Every cut into two pieces, byte by byte, and seeded random cuts into many pieces.
void expect_streams_like_parse(std::string_view name, const std::vector<ToolSpec>& tools,
                               std::string_view text) {
  const ParsedMessage whole = parser(name, tools)->parse(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto p = parser(name, tools);
    expect_same(stream(*p, {text.substr(0, cut), text.substr(cut)}), whole,
                "cut at byte " + std::to_string(cut));
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  expect_same(stream(*parser(name, tools), bytes), whole, "byte by byte");
  std::mt19937 rng(1234);
  for (int pattern = 0; pattern < 30; ++pattern) {
    std::uniform_int_distribution<size_t> len(1, 2 + pattern);
    std::vector<std::string_view> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(len(rng), text.size() - at);
      pieces.push_back(text.substr(at, n));
      at += n;
    }
    expect_same(stream(*parser(name, tools), pieces), whole,
                "random pattern " + std::to_string(pattern));
    if (::testing::Test::HasFailure()) return;
  }
}

// parse() gives `content` and `calls`, and streaming in any pieces gives the same.
void check(std::string_view name, const std::vector<ToolSpec>& tools, std::string_view text,
           const std::string& content, const std::vector<ExpectedCall>& calls) {
  SCOPED_TRACE(std::string(name) + ": " + std::string(text));
  expect_message(parser(name, tools)->parse(text), content, calls);
  expect_streams_like_parse(name, tools, text);
}

// Text that must come back unchanged as content, however it is streamed.
void check_plain(std::string_view name, const std::vector<ToolSpec>& tools, std::string_view text) {
  check(name, tools, text, std::string(text), {});
}

// ---------------------------------------------------------------- registry

TEST(ToolParser, KnowsItsNames) {
  const std::vector<std::string> expected = {"deepseek_v3", "deepseek_v31", "hermes",
                                             "llama3_json", "mistral",      "qwen3_coder"};
  EXPECT_EQ(tool_parser_names(), expected);
  for (const std::string& name : expected) EXPECT_NE(make_tool_parser(name, {}), nullptr) << name;
  EXPECT_EQ(make_tool_parser("nope", {}), nullptr);
  EXPECT_EQ(make_tool_parser("", weather_tools()), nullptr);
  EXPECT_EQ(make_tool_parser("Hermes", {}), nullptr);
}

// ---------------------------------------------------------------- hermes

TEST(HermesToolParser, ContentThenTwoCalls) {
  check("hermes", weather_tools(),
        "I'll check the weather in both cities.\n<tool_call>\n"
        R"({"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}})"
        "\n</tool_call>\n<tool_call>\n"
        R"({"name": "get_weather", "arguments": {"city": "東京", "days": 3}})"
        "\n</tool_call>",
        "I'll check the weather in both cities.\n",
        {{"get_weather", {{"city", "Zürich"}, {"unit", "celsius"}}},
         {"get_weather", {{"city", "東京"}, {"days", 3}}}});
}

TEST(HermesToolParser, CallOnlyWithNestedAndEscapedArguments) {
  check(
      "hermes", weather_tools(),
      "<tool_call>\n"
      R"({"name": "search_code", "arguments": {"query": "if (a < b) { return \"}\"; } 🌧️\n",)"
      R"( "limit": 5, "filters": {"lang": ["c++", "rust"], "path": null}}})"
      "\n</tool_call>",
      "", {{"search_code", json::parse(R"({"query": "if (a < b) { return \"}\"; } 🌧️\n",
            "limit": 5, "filters": {"lang": ["c++", "rust"], "path": null}})")}});
}

TEST(HermesToolParser, TextAfterCallsIsContent) {
  check(
      "hermes", weather_tools(),
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}\n</tool_call>"
      "\n\nThat is all.",
      "\n\nThat is all.", {{"get_time", {{"timezone", "UTC"}}}});
  check("hermes", weather_tools(),
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n\n", "",
        {{"get_time", json::object()}});
  // Text between calls keeps its whitespace; only whitespace right after a call is dropped.
  check("hermes", weather_tools(),
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
        "Also:\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
        "</tool_call>",
        "\nAlso:\n", {{"get_time", json::object()}, {"get_weather", {{"city", "Oslo"}}}});
}

TEST(HermesToolParser, PlainTextWithLookalikes) {
  check_plain("hermes", weather_tools(), "");
  check_plain("hermes", weather_tools(), "Use a <b>tag</b>, or compare a < b; <tool> is not it.");
  check_plain("hermes", weather_tools(), "ends with a partial marker <tool_ca");
}

TEST(HermesToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  // Unknown function (tools were given), name not first so never announced, truncated early.
  check_plain("hermes", tools,
              "Sure.\n<tool_call>\n{\"name\": \"launch_rocket\", \"arguments\": {}}\n</tool_call>");
  check_plain(
      "hermes", tools,
      "<tool_call>\n{\"arguments\": {\"city\": }, \"name\": \"get_weather\"}\n</tool_call>");
  check_plain("hermes", tools, "Looking it up.\n<tool_call>\n{\"na");
  // A broken call does not swallow a good one after it.
  check("hermes", tools,
        "<tool_call>\n{\"name\": \"get_ti<tool_call>\n"
        "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_ti", {{"get_time", {{"timezone", "UTC"}}}});
  // Bad JSON and truncation after the name: parse() keeps all the text as content.
  for (const char* text :
       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"}) {
    expect_message(parser("hermes", tools)->parse(text), text, {});
  }
}

TEST(HermesToolParser, AnyNameWithoutTools) {
  check("hermes", {},
        "<tool_call>\n{\"name\": \"anything\", \"arguments\": {\"x\": 1}}\n</tool_call>", "",
        {{"anything", {{"x", 1}}}});
}

// ---------------------------------------------------------------- streaming behaviour

TEST(ToolParserStreaming, HoldsBackOnlyPossibleMarkers) {
  auto p = parser("hermes", weather_tools());
  EXPECT_EQ(p->feed("Hello <tool").content, "Hello ");
  EXPECT_EQ(p->feed("s are fun").content, "<tools are fun");
  EXPECT_EQ(p->feed(" <").content, " ");
  const ToolStreamDelta end = p->finish();
  EXPECT_EQ(end.content, "<");
  EXPECT_TRUE(end.tool_calls.empty());
}

TEST(ToolParserStreaming, AnnouncesNameBeforeArguments) {
  auto p = parser("hermes", weather_tools());
  ToolStreamDelta d = p->feed("Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"argum");
  EXPECT_EQ(d.content, "Checking.\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_TRUE(d.tool_calls[0].id.has_value());
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = p->feed("ents\": {\"city\": \"Paris\"}}\n</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_FALSE(d.tool_calls[0].id.has_value());
  EXPECT_FALSE(d.tool_calls[0].name.has_value());
  EXPECT_EQ(parse_arguments(d.tool_calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_TRUE(p->finish().tool_calls.empty());
}

TEST(ToolParserStreaming, AnnouncedCallThatBreaksKeepsItsText) {
  // The name went out before the arguments turned out broken: the text follows as content and
  // the call keeps empty arguments (parse() would have made it all content).
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>";
  auto p = parser("hermes", weather_tools());
  const size_t cut = text.find("\"arguments\"");
  std::vector<std::string_view> pieces = {std::string_view(text).substr(0, cut),
                                          std::string_view(text).substr(cut)};
  const Streamed s = stream(*p, pieces);
  EXPECT_EQ(s.content, text);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "");
}

TEST(ToolParserStreaming, ParseIsIndependentOfTheStream) {
  auto p = parser("hermes", weather_tools());
  EXPECT_EQ(p->feed("Before <tool_call>\n{\"name\": \"get_time\"").content, "Before ");
  expect_message(p->parse("plain"), "plain", {});
  const ToolStreamDelta rest = p->feed(", \"arguments\": {\"timezone\": \"UTC\"}}\n</tool_call>");
  ASSERT_EQ(rest.tool_calls.size(), 1u);
  EXPECT_EQ(rest.tool_calls[0].index, 0);
}

// ---------------------------------------------------------------- qwen3_coder

TEST(Qwen3CoderToolParser, ContentThenTwoCalls) {
  check("qwen3_coder", weather_tools(),
        "I'll look that up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n"
        "</parameter>\n<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=get_time>\n<parameter=timezone>\nAmerica/Sao_Paulo\n</parameter>\n</function>\n"
        "</tool_call>",
        "I'll look that up.\n",
        {{"get_weather", {{"city", "São Paulo"}, {"days", 5}}},
         {"get_time", {{"timezone", "America/Sao_Paulo"}}}});
}

TEST(Qwen3CoderToolParser, MultiLineValuesKeepTheirWhitespace) {
  const std::vector<ToolSpec> tools = {
      {"write_file", json::parse(R"({"type": "object", "properties": {
          "path": {"type": "string"}, "content": {"type": "string"}}})")}};
  check("qwen3_coder", tools,
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n"
        "<parameter=content>\n\ndef f(a, b):\n    return {\"sum\": a + b}  # a < b > c\n\n"
        "</parameter>\n</function>\n</tool_call>",
        "",
        {{"write_file",
          {{"path", "src/main.py"},
           {"content", "\ndef f(a, b):\n    return {\"sum\": a + b}  # a < b > c\n"}}}});
}

TEST(Qwen3CoderToolParser, ValuesTypedBySchema) {
  const std::vector<ToolSpec> tools = {{"configure", json::parse(R"({"type": "object",
      "properties": {
        "count": {"type": "integer"}, "ratio": {"type": "number"}, "enabled": {"type": "boolean"},
        "verbose": {"type": "boolean"}, "options": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "string"}}, "zip": {"type": "string"},
        "bad_count": {"type": "integer"}, "maybe": {"type": ["integer", "null"]},
        "label": {"anyOf": [{"type": "number"}, {"type": "string"}]},
        "fraction": {"type": "integer"}}})")}};
  const std::string text =
      "<tool_call>\n<function=configure>\n"
      "<parameter=count>\n3\n</parameter>\n"
      "<parameter=ratio>\n0.75\n</parameter>\n"
      "<parameter=enabled>\ntrue\n</parameter>\n"
      "<parameter=verbose>\nFalse\n</parameter>\n"
      "<parameter=options>\n{\"depth\": 2, \"mode\": \"fast\"}\n</parameter>\n"
      "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
      "<parameter=zip>\n02139\n</parameter>\n"
      "<parameter=bad_count>\nmany\n</parameter>\n"
      "<parameter=maybe>\nnull\n</parameter>\n"
      "<parameter=label>\n42\n</parameter>\n"
      "<parameter=fraction>\n2.5\n</parameter>\n"
      "<parameter=extra>\n7\n</parameter>\n"
      "</function>\n</tool_call>";
  const ParsedMessage m = parser("qwen3_coder", tools)->parse(text);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  const json args = parse_arguments(m.tool_calls[0].arguments);
  EXPECT_EQ(args.at("count"), json(3));
  EXPECT_TRUE(args.at("count").is_number_integer());
  EXPECT_EQ(args.at("ratio"), json(0.75));
  EXPECT_EQ(args.at("enabled"), json(true));
  EXPECT_EQ(args.at("verbose"), json(false));
  EXPECT_EQ(args.at("options"), json({{"depth", 2}, {"mode", "fast"}}));
  EXPECT_EQ(args.at("tags"), json({"a", "b"}));
  EXPECT_EQ(args.at("zip"), json("02139"));  // looks like a number, typed as a string
  EXPECT_EQ(args.at("bad_count"), json("many"));
  EXPECT_TRUE(args.at("maybe").is_null());
  EXPECT_EQ(args.at("label"), json(42));
  EXPECT_EQ(args.at("fraction"), json("2.5"));  // not an integer: kept as text
  EXPECT_EQ(args.at("extra"), json("7"));       // not in the schema
  EXPECT_EQ(args.size(), 12u);
  // Key order is the model's, not sorted.
  EXPECT_EQ(m.tool_calls[0].arguments.rfind("{\"count\":3,\"ratio\":0.75,", 0), 0u)
      << m.tool_calls[0].arguments;
  expect_streams_like_parse("qwen3_coder", tools, text);
}

TEST(Qwen3CoderToolParser, WithoutToolsEverythingIsAString) {
  check("qwen3_coder", {},
        "<tool_call>\n<function=run>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
        "", {{"run", {{"n", "3"}}}});
}

TEST(Qwen3CoderToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  check_plain("qwen3_coder", tools,
              "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n"
              "</tool_call>");
  check_plain("qwen3_coder", tools, "Let me see.\n<tool_call>\n<function=get_wea");
  check_plain("qwen3_coder", tools, "<tool_call>\n<get_weather city=\"Paris\"/>\n</tool_call>");
  for (const char* text :
       {"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"}) {
    expect_message(parser("qwen3_coder", tools)->parse(text), text, {});
  }
}

// ---------------------------------------------------------------- deepseek_v3

TEST(DeepSeekV3ToolParser, TwoCalls) {
  check("deepseek_v3", weather_tools(),
        "好的，我来查一下。<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_"
        "weather\n"
        "```json\n{\"city\": \"北京\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n"
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"timezone\": "
        "\"Asia/Shanghai\"}\n"
        "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "好的，我来查一下。",
        {{"get_weather", {{"city", "北京"}, {"unit", "celsius"}}},
         {"get_time", {{"timezone", "Asia/Shanghai"}}}});
}

TEST(DeepSeekV3ToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  check_plain(
      "deepseek_v3", tools,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>format_disk\n```json\n{}"
      "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  check_plain("deepseek_v3", tools, "a<｜tool▁calls▁begin｜>b");
  check_plain("deepseek_v3", tools,
              "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁se");
  for (const char* text : {
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
           "{\"timezone\": \"UTC\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
           "```json\n{\"timezone\": UTC}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       }) {
    expect_message(parser("deepseek_v3", tools)->parse(text), text, {});
  }
}

// ---------------------------------------------------------------- deepseek_v31

TEST(DeepSeekV31ToolParser, ContentThenTwoCalls) {
  check("deepseek_v31", weather_tools(),
        "Let me check both.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        "{\"city\": \"Paris\", \"days\": "
        "2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
        "{\"timezone\": \"Europe/Paris\", \"note\": \"½ past — "
        "ok\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Let me check both.",
        {{"get_weather", {{"city", "Paris"}, {"days", 2}}},
         {"get_time", {{"timezone", "Europe/Paris"}, {"note", "½ past — ok"}}}});
}

TEST(DeepSeekV31ToolParser, UnclosedSectionKeepsCompleteCalls) {
  check("deepseek_v31", weather_tools(),
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"timezone\": \"UTC\"}"
        "<｜tool▁call▁end｜>\n",
        "", {{"get_time", {{"timezone", "UTC"}}}});
}

TEST(DeepSeekV31ToolParser, BrokenCallBesideGoodOne) {
  check("deepseek_v31", weather_tools(),
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
        "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"timezone\": \"UTC\"}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜> Done.",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜> Done.",
        {{"get_time", {{"timezone", "UTC"}}}});
}

TEST(DeepSeekV31ToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  check_plain("deepseek_v31", tools,
              "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
              "<｜tool▁calls▁end｜>");
  check_plain("deepseek_v31", tools, "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_wea");
  for (const char* text :
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"timezone\": \"UT",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>[1]<"
        "｜tool▁call▁end｜>"}) {
    expect_message(parser("deepseek_v31", tools)->parse(text), text, {});
  }
}

// ---------------------------------------------------------------- llama3_json

TEST(Llama3JsonToolParser, WholeMessageCalls) {
  const auto tools = weather_tools();
  check("llama3_json", tools,
        R"({"name": "get_weather", "parameters": {"city": "Kraków", "days": 2}})", "",
        {{"get_weather", {{"city", "Kraków"}, {"days", 2}}}});
  check("llama3_json", tools,
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}; "
        "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"America/Lima\"}}",
        "", {{"get_weather", {{"city", "Lima"}}}, {"get_time", {{"timezone", "America/Lima"}}}});
}

TEST(Llama3JsonToolParser, OtherMessagesAreContent) {
  const auto tools = weather_tools();
  check_plain("llama3_json", tools, "The weather in Paris is {\"sunny\": true}.");
  check_plain("llama3_json", tools, "{\"answer\": 42}");
  check_plain("llama3_json", tools, "{\"name\": \"open_door\", \"parameters\": {}}");
  check_plain("llama3_json", tools, "<|python_tag|>brave_search.call(query=\"weather\")");
  check_plain("llama3_json", tools, "  \n");
  const char* truncated = "{\"name\": \"get_time\", \"parameters\": {\"timezone\": ";
  expect_message(parser("llama3_json", tools)->parse(truncated), truncated, {});
}

// ---------------------------------------------------------------- mistral

TEST(MistralToolParser, ListOfCalls) {
  check(
      "mistral", weather_tools(),
      "Let me check.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}},"
      " {\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}]",
      "Let me check.",
      {{"get_weather", {{"city", "Lyon"}}}, {"get_time", {{"timezone", "Europe/Paris"}}}});
}

TEST(MistralToolParser, NamedCalls) {
  check("mistral", weather_tools(),
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Ålesund\", \"days\": 1}"
        "[TOOL_CALLS]get_time[ARGS]{\"timezone\": \"UTC\"}",
        "",
        {{"get_weather", {{"city", "Ålesund"}, {"days", 1}}}, {"get_time", {{"timezone", "UTC"}}}});
}

TEST(MistralToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  check_plain("mistral", tools, "[TOOL_CALLS] not json");
  check_plain("mistral", tools, "[TOOL_CALLS][{\"name\": \"fire\", \"arguments\": {}}]");
  check_plain("mistral", tools, "[TOOL_CALLS]fire[ARGS]{}");
  check_plain("mistral", tools, "[TOOL_CALLS][]");
  check_plain("mistral", tools, "[TOOL_CALLS][{\"arguments\": {\"city\": \"Ly");
  for (const char* text :
       {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ly",
        "[TOOL_CALLS]get_time[ARGS]{\"timezone\": UTC}"}) {
    expect_message(parser("mistral", tools)->parse(text), text, {});
  }
}

// ---------------------------------------------------------------- what the templates write

std::string template_path(const std::string& file) {
  return test::shared_dir() + "/testdata/chat_templates/" + file;
}

std::string read_template(const std::string& file) {
  std::ifstream in(template_path(file));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The assistant turn a template renders for `assistant`, without its end-of-turn marker (if
// any): the whole conversation minus the prompt that asks for that turn.
std::string rendered_turn(const std::string& file, const ojson& assistant, const ojson& extra,
                          std::string_view end_of_turn) {
  const std::string source = read_template(file);
  EXPECT_FALSE(source.empty()) << file;
  const ojson user = {{"role", "user"}, {"content", "What is the weather?"}};
  ojson prompt = extra;
  prompt["messages"] = ojson::array({user});
  prompt["add_generation_prompt"] = true;
  ojson full = extra;
  full["messages"] = ojson::array({user, assistant});
  full["add_generation_prompt"] = false;
  const auto head = render(source, prompt);
  const auto all = render(source, full);
  EXPECT_TRUE(head.ok()) << file << ": " << head.error().message;
  EXPECT_TRUE(all.ok()) << file << ": " << all.error().message;
  if (!head.ok() || !all.ok()) return "";
  EXPECT_EQ(all->rfind(*head, 0), 0u) << *all;
  std::string turn = all->substr(head->size());
  if (end_of_turn.empty()) return turn;
  const size_t end = turn.rfind(end_of_turn);
  EXPECT_NE(end, std::string::npos) << turn;
  return turn.substr(0, end);
}

// DeepSeek templates start with the BOS token the tokenizer config supplies.
ojson deepseek_context() {
  return {{"bos_token", "<｜begin▁of▁sentence｜>"}};
}

ojson call_message(const ojson& content, const std::vector<ojson>& calls) {
  return {{"role", "assistant"}, {"content", content}, {"tool_calls", ojson(calls)}};
}

ojson tool_call(const std::string& name, const ojson& arguments) {
  return {{"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

TEST(ToolParserTemplates, Qwen3WritesHermesCalls) {
  KESTREL_SKIP_IF_ABSENT(template_path("qwen3.jinja"), "the shared chat template");
  const std::string turn = rendered_turn(
      "qwen3.jinja",
      call_message("Let me check.", {tool_call("get_weather", {{"city", "Zürich"}, {"days", 2}}),
                                     tool_call("get_time", {{"timezone", "Europe/Zurich"}})}),
      {{"enable_thinking", false}}, "<|im_end|>");
  check("hermes", weather_tools(), turn, "Let me check.\n",
        {{"get_weather", {{"city", "Zürich"}, {"days", 2}}},
         {"get_time", {{"timezone", "Europe/Zurich"}}}});
}

TEST(ToolParserTemplates, Qwen3CoderWritesQwen3CoderCalls) {
  KESTREL_SKIP_IF_ABSENT(template_path("qwen3-coder.jinja"), "the shared chat template");
  const std::string turn = rendered_turn(
      "qwen3-coder.jinja",
      call_message("", {tool_call("get_weather", {{"city", "New York"}, {"days", 4}}),
                        tool_call("search_code", {{"query", "fn main() {\n}"}, {"limit", 10}})}),
      ojson::object(), "<|im_end|>");
  check("qwen3_coder", weather_tools(), turn, "",
        {{"get_weather", {{"city", "New York"}, {"days", 4}}},
         {"search_code", {{"query", "fn main() {\n}"}, {"limit", 10}}}});
}

TEST(ToolParserTemplates, DeepSeekV3WritesDeepSeekV3Calls) {
  KESTREL_SKIP_IF_ABSENT(template_path("deepseek-v3.jinja"), "the shared chat template");
  const auto tools = weather_tools();
  std::string turn = rendered_turn(
      "deepseek-v3.jinja",
      call_message(nullptr, {tool_call("get_weather", R"({"city": "Osaka", "days": 3})"),
                             tool_call("get_time", R"({"timezone": "Asia/Tokyo"})")}),
      deepseek_context(), "<｜end▁of▁sentence｜>");
  check("deepseek_v3", tools, turn, "",
        {{"get_weather", {{"city", "Osaka"}, {"days", 3}}},
         {"get_time", {{"timezone", "Asia/Tokyo"}}}});
  // With a single call the template never closes the section (nor the turn).
  turn = rendered_turn("deepseek-v3.jinja",
                       call_message(nullptr, {tool_call("get_time", R"({"timezone": "UTC"})")}),
                       deepseek_context(), "");
  check("deepseek_v3", tools, turn, "", {{"get_time", {{"timezone", "UTC"}}}});
}

TEST(ToolParserTemplates, DeepSeekV31WritesDeepSeekV31Calls) {
  KESTREL_SKIP_IF_ABSENT(template_path("deepseek-v3.1.jinja"), "the shared chat template");
  const std::string turn = rendered_turn(
      "deepseek-v3.1.jinja",
      call_message("Checking both.",
                   {tool_call("get_weather", R"({"city": "Seoul", "unit": "celsius"})"),
                    tool_call("get_time", R"({"timezone": "Asia/Seoul"})")}),
      deepseek_context(), "<｜end▁of▁sentence｜>");
  check("deepseek_v31", weather_tools(), turn, "Checking both.",
        {{"get_weather", {{"city", "Seoul"}, {"unit", "celsius"}}},
         {"get_time", {{"timezone", "Asia/Seoul"}}}});
}

}  // namespace
}  // namespace kestrel::chat
