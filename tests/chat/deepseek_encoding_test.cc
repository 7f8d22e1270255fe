// The native DeepSeek-V3.2 and V4 prompt encoders against the reference encoders' goldens
// (tools/make_deepseek_encoding_goldens.py), byte for byte; the calls they write read back by
// the DSML tool-call parsers; their prompts read by the reasoning parsers; and odd input.
#include "chat/deepseek_encoding.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "chat/tool_parsers/tool_parser.h"
#include "test_paths.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

ojson load_cases() {
  const std::string path = test::fixtures_dir() + "/chat/deepseek_encoding_cases.json";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return ojson::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// Where two strings first differ, with some context, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "at byte " + std::to_string(i) + "\n  want: …" + want.substr(from, 120) + "\n  got:  …" +
         got.substr(from, 120);
}

Expected<std::string> render(std::string_view mode, const ojson& conversation,
                             const ojson* tools = nullptr, const ojson& kwargs = ojson::object()) {
  const auto encoding = deepseek_encoding(mode);
  EXPECT_TRUE(encoding.has_value()) << mode;
  return render_deepseek_prompt(*encoding, conversation, tools, kwargs);
}

TEST(DeepSeekEncoding, MatchesTheReferenceEncoders) {
  const ojson cases = load_cases();
  ASSERT_TRUE(cases.is_array());
  std::set<std::string> modes;
  size_t prompts = 0, errors = 0;
  for (const ojson& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string mode = c.at("mode").get<std::string>();
    modes.insert(mode);
    const ojson& tools = c.at("tools");
    auto got =
        render(mode, c.at("conversation"), tools.is_null() ? nullptr : &tools, c.at("kwargs"));
    if (c.contains("prompt")) {
      ++prompts;
      ASSERT_TRUE(got.ok()) << got.error().message;
      const std::string want = c["prompt"].get<std::string>();
      EXPECT_EQ(*got, want) << first_difference(want, *got);
    } else {
      ++errors;
      EXPECT_FALSE(got.ok()) << "the reference refused it: " << c.at("error").get<std::string>();
    }
  }
  EXPECT_EQ(modes, (std::set<std::string>{"deepseek_v32", "deepseek_v4"}));
  EXPECT_GE(prompts, 60u);
  EXPECT_GE(errors, 8u);
}

TEST(DeepSeekEncoding, TokenizerModes) {
  EXPECT_EQ(deepseek_encoding("deepseek_v32"), DeepSeekEncoding::kV32);
  EXPECT_EQ(deepseek_encoding("deepseek_v4"), DeepSeekEncoding::kV4);
  for (std::string_view other : {"auto", "hf", "deepseek_v41", "mistral", "", "DeepSeek_V4"})
    EXPECT_FALSE(deepseek_encoding(other).has_value()) << other;
}

TEST(DeepSeekEncoding, ToolsAsVllmSerialisesThem) {
  // Keys outside the function definition go; absent description and parameters are null.
  const ojson conversation = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  const ojson tools = ojson::parse(R"([{"type": "function", "extra": 1, "function":
      {"name": "ping", "x-note": "dropped", "strict": null}},
      {"function": {"parameters": {"type": "object"}, "name": "pong", "strict": false,
       "description": "d"}, "defer_loading": true}])");
  for (std::string_view mode : {"deepseek_v32", "deepseek_v4"}) {
    auto prompt = render(mode, conversation, &tools);
    ASSERT_TRUE(prompt.ok()) << prompt.error().message;
    EXPECT_NE(prompt->find("\n{\"name\": \"ping\", \"description\": null, \"parameters\": null}\n"),
              std::string::npos)
        << *prompt;
    EXPECT_NE(prompt->find("{\"name\": \"pong\", \"description\": \"d\", \"parameters\": "
                           "{\"type\": \"object\"}, \"strict\": false, \"defer_loading\": true}"),
              std::string::npos)
        << *prompt;
  }
}

// The assistant turn an encoder writes for `assistant`: what follows the hand-over
// (<｜Assistant｜></think>) up to the end-of-sentence token.
std::string written_turn(std::string_view mode, const ojson& assistant) {
  const ojson conversation = ojson::array({{{"role", "user"}, {"content", "Weather?"}}, assistant});
  auto prompt = render(mode, conversation, nullptr, {{"thinking", false}});
  EXPECT_TRUE(prompt.ok()) << prompt.error().message;
  if (!prompt.ok()) return "";
  const std::string handover = "<｜Assistant｜></think>";
  const size_t start = prompt->find(handover) + handover.size();
  const size_t end = prompt->rfind("<｜end▁of▁sentence｜>");
  EXPECT_NE(end, std::string::npos);
  return prompt->substr(start, end - start);
}

TEST(DeepSeekEncoding, ToolParsersReadTheCallsTheEncodersWrite) {
  const ojson arguments = ojson::parse(
      R"({"city": "Zürich", "days": 2, "when": "42", "flags": [true, null], "opts": {"a": 1.5},
          "text": "multi\nline \"quoted\" <b>"})");
  const ojson assistant = {
      {"role", "assistant"},
      {"content", "Let me check."},
      {"tool_calls",
       ojson::array({{{"id", "a"},
                      {"type", "function"},
                      {"function", {{"name", "get_weather"}, {"arguments", arguments}}}},
                     {{"id", "b"},
                      {"type", "function"},
                      {"function", {{"name", "get_time"}, {"arguments", ojson::object()}}}}})}};
  for (std::string_view mode : {"deepseek_v32", "deepseek_v4"}) {
    SCOPED_TRACE(mode);
    const std::string turn = written_turn(mode, assistant);
    const ParsedMessage m = make_tool_parser(mode, {})->parse(turn);
    EXPECT_EQ(m.content, "Let me check.\n\n");
    ASSERT_EQ(m.tool_calls.size(), 2u) << turn;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(ojson::parse(m.tool_calls[0].arguments), arguments);
    EXPECT_EQ(m.tool_calls[1].name, "get_time");
    EXPECT_EQ(m.tool_calls[1].arguments, "{}");
  }
}

TEST(DeepSeekEncoding, ReasoningParsersFollowThePrompt) {
  const ojson conversation = ojson::parse(R"([{"role": "user", "content": "2+2?"}])");
  const std::string output = "Four.</think>4";
  struct Case {
    std::string_view mode;
    ojson kwargs;
    std::string reasoning, content;
  };
  const Case cases[] = {
      {"deepseek_v32", ojson::object(), "", output},  // V3.2 thinks only when asked
      {"deepseek_v32", {{"thinking", true}}, "Four.", "4"},
      {"deepseek_v4", ojson::object(), "Four.", "4"},  // V4 thinks unless told not to
      {"deepseek_v4", {{"reasoning_effort", "none"}}, "", output},
      {"deepseek_v4", {{"enable_thinking", false}}, "", output},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mode) + " " + c.kwargs.dump());
    auto prompt = render(c.mode, conversation, nullptr, c.kwargs);
    ASSERT_TRUE(prompt.ok()) << prompt.error().message;
    const ReasoningSplit split = make_reasoning_parser(c.mode, *prompt)->parse(output);
    EXPECT_EQ(split.reasoning, c.reasoning);
    EXPECT_EQ(split.content, c.content);
  }
}

TEST(DeepSeekEncoding, OddInputIsAnErrorOrAPrompt) {
  // Shapes a caller might pass that vLLM's parser never would: nothing may crash, and what the
  // reference would choke on is an error.
  const ojson odd_values = ojson::parse(
      R"([null, 1, "text", [], {}, [1, "x", {"type": "text"}], {"type": "image"},
          [{"type": "text", "text": null}], [{"type": "video"}], true, -2.5])");
  const char* keys[] = {"role", "content", "tool_calls", "reasoning", "tools", "tool_call_id"};
  for (std::string_view mode : {"deepseek_v32", "deepseek_v4"}) {
    for (const char* key : keys) {
      for (const ojson& value : odd_values) {
        for (const char* role : {"user", "assistant", "tool", "system", "developer"}) {
          ojson msg = {{"role", role}, {"content", "x"}};
          msg[key] = value;
          const ojson conversation = ojson::array({{{"role", "user"}, {"content", "q"}}, msg});
          for (const ojson& kwargs : {ojson::object(), ojson{{"thinking", true}}}) {
            auto prompt = render(mode, conversation, nullptr, kwargs);
            if (prompt.ok()) {
              EXPECT_FALSE(prompt->empty());
            }
          }
        }
      }
    }
    EXPECT_FALSE(render(mode, ojson::object()).ok());
    EXPECT_FALSE(render(mode, ojson::array(), nullptr, ojson::array()).ok());
    const ojson not_a_list = ojson::object();
    EXPECT_FALSE(render(mode, ojson::array({{{"role", "user"}}}), &not_a_list).ok());
  }
  // An empty conversation: V3.2's wrapper looks at the last message, V4's renders only BOS.
  EXPECT_FALSE(render("deepseek_v32", ojson::array()).ok());
  EXPECT_EQ(*render("deepseek_v4", ojson::array()), "<｜begin▁of▁sentence｜>");
}

}  // namespace
}  // namespace kestrel::chat
