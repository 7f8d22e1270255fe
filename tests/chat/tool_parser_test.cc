// Tool-call parsers: model-style outputs of every family, text the real chat templates render
// for assistant tool calls read back, malformed calls kept as content, and the streaming
// invariant — any way of cutting the text into pieces streams what parse() returns.
#include "chat/tool_parsers/tool_parser.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/tool_parser_checks.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

using namespace tool_checks;

// ---------------------------------------------------------------- registry

TEST(ToolParser, KnowsItsNames) {
  const std::vector<std::string> expected = {"deepseek_v3", "deepseek_v31", "deepseek_v32",
                                             "deepseek_v4", "hermes",       "llama3_json",
                                             "mistral",     "qwen3_coder"};
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
