// The DSML tool-call parsers (deepseek_v32, deepseek_v4): calls as DeepSeek's encoders write
// them, the string flag deciding every value's type, broken calls kept as content, and the
// streaming invariant over every cut of the text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_parser_checks.h"
#include "chat/tool_parsers/tool_parser.h"

namespace kestrel::chat {
namespace {

using namespace tool_checks;

// One DSML block for `parser`: deepseek_v32 wraps calls in function_calls, deepseek_v4 in
// tool_calls.
std::string block(std::string_view parser, const std::string& invokes) {
  const std::string name = parser == "deepseek_v32" ? "function_calls" : "tool_calls";
  return "<｜DSML｜" + name + ">\n" + invokes + "\n</｜DSML｜" + name + ">";
}

std::string invoke(const std::string& name, const std::string& parameters) {
  return "<｜DSML｜invoke name=\"" + name + "\">\n" + parameters + "\n</｜DSML｜invoke>";
}

std::string param(const std::string& name, bool is_string, const std::string& value) {
  return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") +
         "\">" + value + "</｜DSML｜parameter>";
}

class DsmlToolParser : public ::testing::TestWithParam<std::string> {
 protected:
  std::string name() const { return GetParam(); }
  std::string block(const std::string& invokes) const {
    return kestrel::chat::block(name(), invokes);
  }
};

TEST_P(DsmlToolParser, ContentThenTwoCalls) {
  // What the encoders write for an assistant turn with content and calls.
  check(name(), weather_tools(),
        "Let me check both.\n\n" +
            block(invoke("get_weather", param("city", true, "Zürich") + "\n" +
                                            param("days", false, "2") + "\n" +
                                            param("unit", true, "celsius")) +
                  "\n" + invoke("get_time", param("timezone", true, "Europe/Zurich"))),
        "Let me check both.\n\n",
        {{"get_weather", {{"city", "Zürich"}, {"days", 2}, {"unit", "celsius"}}},
         {"get_time", {{"timezone", "Europe/Zurich"}}}});
}

TEST_P(DsmlToolParser, StringFlagDecidesTheType) {
  const std::string params =
      param("a", true, "42") + "\n" + param("b", true, "true") + "\n" + param("c", false, "42") +
      "\n" + param("d", false, "true") + "\n" + param("e", false, "\"quoted\"") + "\n" +
      param("f", false, "{\"x\": [1, null, 2.5]}") + "\n" + param("g", false, " null ") + "\n" +
      param("h", true, "  two\nlines <b>\"q\"</b> ") + "\n" + param("i", true, "");
  check(name(), {}, block(invoke("anything", params)), "",
        {{"anything", json::parse(R"({"a": "42", "b": "true", "c": 42, "d": true, "e": "quoted",
            "f": {"x": [1, null, 2.5]}, "g": null, "h": "  two\nlines <b>\"q\"</b> ", "i": ""})")}});
}

TEST_P(DsmlToolParser, ArgumentsKeepParameterOrder) {
  const ParsedMessage m =
      parser(name(), {})
          ->parse(block(invoke("f", param("zeta", false, "1") + param("alpha", true, "x") +
                                        param("mid", false, "[]") + param("zeta", false, "2"))));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // A repeated parameter takes the later value in the earlier place, as a Python dict does.
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"zeta":2,"alpha":"x","mid":[]})");
}

TEST_P(DsmlToolParser, CallWithoutParameters) {
  check(name(), weather_tools(), block(invoke("get_time", "")), "", {{"get_time", json::object()}});
}

TEST_P(DsmlToolParser, TextAfterTheBlockIsContent) {
  check(name(), weather_tools(),
        block(invoke("get_time", param("timezone", true, "UTC"))) + "\n\nDone, one call.",
        "\n\nDone, one call.", {{"get_time", {{"timezone", "UTC"}}}});
}

TEST_P(DsmlToolParser, SpacingInsideTags) {
  const std::string text = block(
      "<｜DSML｜invoke  name=\"get_weather\" >\r\n<｜DSML｜parameter\tname=\"city\"   "
      "string=\"true\"\n>Oslo</｜DSML｜parameter>  \n\n<｜DSML｜parameter name=\"days\" "
      "string=\"false\">\n3\n</｜DSML｜parameter>\n</｜DSML｜invoke>");
  check(name(), weather_tools(), text, "", {{"get_weather", {{"city", "Oslo"}, {"days", 3}}}});
}

TEST_P(DsmlToolParser, UnclosedBlockKeepsCompleteCalls) {
  const std::string open = block("").substr(0, block("").find('\n') + 1);
  check(name(), weather_tools(),
        open + invoke("get_time", param("timezone", true, "UTC")) + "\nmore text", "\nmore text",
        {{"get_time", {{"timezone", "UTC"}}}});
}

TEST_P(DsmlToolParser, BrokenCallBesideGoodOne) {
  const std::string bad = invoke("fire_missiles", param("target", true, "moon"));
  const std::string good = invoke("get_time", param("timezone", true, "UTC"));
  const std::string text = block(bad + "\n" + good);
  // The block's opening tag goes with the broken first call (content); its closing tag is
  // dropped after the good call.
  check(name(), weather_tools(), text, text.substr(0, text.find(good) - 1),
        {{"get_time", {{"timezone", "UTC"}}}});
}

TEST_P(DsmlToolParser, MalformedCallsStayContent) {
  const auto tools = weather_tools();
  const std::string city = param("city", true, "Rome");
  // Broken before the name is known: streaming gives what parse() gives.
  for (const std::string& text : {
           block(invoke("fire_missiles", city)),  // not among the request's tools
           block(invoke("", city)),
           block("<｜DSML｜invoke>\n" + city + "\n</｜DSML｜invoke>"),
           block("<｜DSML｜invoke name=get_weather>\n" + city + "\n</｜DSML｜invoke>"),
           block("get_weather(city=\"Rome\")"),
           block(""),
       }) {
    check_plain(name(), tools, text);
  }
  // Broken after the name: parse() keeps it all as content (a stream has announced the call).
  const std::string whole = block(invoke("get_weather", city));
  for (const std::string& text : {
           block(invoke("get_weather", param("days", false, "2 days"))),  // not JSON
           block(invoke("get_weather", param("days", false, ""))),
           block(
               invoke("get_weather", "<｜DSML｜parameter name=\"city\">Rome</｜DSML｜parameter>")),
           block(
               invoke("get_weather",
                      "<｜DSML｜parameter name=\"city\" string=\"yes\">Rome</｜DSML｜parameter>")),
           block(
               invoke("get_weather",
                      "<｜DSML｜parameter string=\"true\" name=\"city\">Rome</｜DSML｜parameter>")),
           block(invoke("get_weather", city + " and " + city)),  // text between parameters
           block(invoke("get_weather", "<｜DSML｜parameter name=\"city\" string=\"true\">Rome")),
           whole.substr(0, 60),  // cut off before the call ends
           whole.substr(0, whole.find("</｜DSML｜invoke>") + 5),
       }) {
    expect_message(parser(name(), tools)->parse(text), text, {});
  }
}

TEST_P(DsmlToolParser, AnnouncedCallThatBreaksKeepsItsText) {
  const std::string text = block(invoke("get_weather", param("days", false, "2 days")));
  const size_t cut = text.find("<｜DSML｜parameter");
  auto p = parser(name(), weather_tools());
  const Streamed s =
      stream(*p, {std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)});
  EXPECT_EQ(s.content, text);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "");
}

TEST_P(DsmlToolParser, AnyPlainNameWithoutTools) {
  check(name(), {}, block(invoke("lookup.v2", param("q", true, "x"))), "",
        {{"lookup.v2", {{"q", "x"}}}});
  check_plain(name(), {}, block(invoke("two words", param("q", true, "x"))));
}

TEST_P(DsmlToolParser, AnnouncesNameBeforeArguments) {
  auto p = parser(name(), weather_tools());
  const std::string text = "Sure.\n\n" + block(invoke("get_weather", param("city", true, "Lima")));
  const size_t cut = text.find("<｜DSML｜parameter");
  ToolStreamDelta d = p->feed(std::string_view(text).substr(0, cut));
  EXPECT_EQ(d.content, "Sure.\n\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls[0].id.has_value());
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = p->feed(std::string_view(text).substr(cut));
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_FALSE(d.tool_calls[0].id.has_value());
  EXPECT_FALSE(d.tool_calls[0].name.has_value());
  EXPECT_EQ(parse_arguments(d.tool_calls[0].arguments), json({{"city", "Lima"}}));
  EXPECT_TRUE(p->finish().tool_calls.empty());
}

TEST_P(DsmlToolParser, HoldsBackOnlyPossibleMarkup) {
  auto p = parser(name(), weather_tools());
  EXPECT_EQ(p->feed("a < b and <｜DS").content, "a < b and ");
  EXPECT_EQ(p->feed("ML｜ is a tag").content, "<｜DSML｜ is a tag");
  const ToolStreamDelta end = p->finish();
  EXPECT_EQ(end.content, "");
  EXPECT_TRUE(end.tool_calls.empty());
}

INSTANTIATE_TEST_SUITE_P(Parsers, DsmlToolParser, ::testing::Values("deepseek_v32", "deepseek_v4"),
                         [](const auto& info) { return info.param; });

TEST(DsmlToolParsers, EachReadsOnlyItsOwnBlock) {
  const std::string call = invoke("get_time", param("timezone", true, "UTC"));
  check_plain("deepseek_v32", weather_tools(), block("deepseek_v4", call));
  check_plain("deepseek_v4", weather_tools(), block("deepseek_v32", call));
  check("deepseek_v4", weather_tools(), block("deepseek_v4", call), "",
        {{"get_time", {{"timezone", "UTC"}}}});
}

}  // namespace
}  // namespace kestrel::chat
