// tests/chat/tool_parser_checks.h — what the tool-call parser tests assert: parse() gives the
// expected content and calls with well-formed ids, and streaming the same text cut into pieces
// any way (every two-piece cut, byte by byte, seeded random cuts) gives what parse() gives.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_parsers/tool_parser.h"

namespace kestrel::chat::tool_checks {

using nlohmann::json;

struct ExpectedCall {
  std::string name;
  json arguments;
};

inline std::vector<ToolSpec> weather_tools() {
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

inline std::unique_ptr<ToolParser> parser(std::string_view name, std::vector<ToolSpec> tools) {
  auto p = make_tool_parser(name, std::move(tools));
  EXPECT_NE(p, nullptr) << name;
  return p;
}

inline json parse_arguments(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  EXPECT_TRUE(j.is_object()) << "arguments are not a JSON object: " << text;
  return j;
}

inline void expect_ids(const std::vector<ToolCall>& calls) {
  static const std::regex kId("call_[A-Za-z0-9]{24}");
  std::set<std::string> seen;
  for (const ToolCall& c : calls) {
    EXPECT_TRUE(std::regex_match(c.id, kId)) << c.id;
    EXPECT_TRUE(seen.insert(c.id).second) << "duplicate id " << c.id;
  }
}

inline void expect_message(const ParsedMessage& m, const std::string& content,
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

inline void take(const ToolStreamDelta& d, Streamed& out) {
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

inline Streamed stream(ToolParser& p, const std::vector<std::string_view>& pieces) {
  Streamed out;
  for (std::string_view piece : pieces) take(p.feed(piece), out);
  take(p.finish(), out);
  return out;
}

inline void expect_same(const Streamed& s, const ParsedMessage& m, const std::string& how) {
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
inline void expect_streams_like_parse(std::string_view name, const std::vector<ToolSpec>& tools,
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
inline void check(std::string_view name, const std::vector<ToolSpec>& tools, std::string_view text,
                  const std::string& content, const std::vector<ExpectedCall>& calls) {
  SCOPED_TRACE(std::string(name) + ": " + std::string(text));
  expect_message(parser(name, tools)->parse(text), content, calls);
  expect_streams_like_parse(name, tools, text);
}

// Text that must come back unchanged as content, however it is streamed.
inline void check_plain(std::string_view name, const std::vector<ToolSpec>& tools,
                        std::string_view text) {
  check(name, tools, text, std::string(text), {});
}

}  // namespace kestrel::chat::tool_checks
