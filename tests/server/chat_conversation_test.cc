// The conversation handed to chat templates, normalised as vLLM's chat_utils does it.
#include "server/chat_conversation.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

json call(const json& arguments) {
  return {{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", arguments}}}};
}

TEST(ChatConversation, NullOrAbsentContentBecomesEmptyString) {
  const json messages = {
      {{"role", "user"}, {"content", "hi"}},
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call("{}")}}},
      {{"role", "assistant"}, {"tool_calls", {call("{}")}}},  // litellm sends no content key
  };
  const ojson out = template_conversation(messages);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1]["content"], "");
  EXPECT_EQ(out[2]["content"], "");
  EXPECT_TRUE(out[1]["content"].is_string());
}

TEST(ChatConversation, ToolCallArgumentsBecomeObjects) {
  const json messages = {{{"role", "assistant"},
                          {"content", ""},
                          {"tool_calls",
                           {call(R"({"city": "Paris", "days": 3})"), call("not json"),
                            call(nullptr), call(json{{"already", "object"}})}}}};
  const ojson out = template_conversation(messages);
  const ojson& calls = out[0]["tool_calls"];
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0]["function"]["arguments"], (ojson{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(calls[0]["id"], "call_1");
  EXPECT_EQ(calls[1]["function"]["arguments"], ojson::object());  // as vLLM: {} for non-JSON
  EXPECT_EQ(calls[2]["function"]["arguments"], ojson::object());
  EXPECT_EQ(calls[3]["function"]["arguments"], (ojson{{"already", "object"}}));
}

TEST(ChatConversation, EmptyToolCallsAreDropped) {
  const ojson out = template_conversation(
      {{{"role", "assistant"}, {"content", "x"}, {"tool_calls", json::array()}}});
  EXPECT_FALSE(out[0].contains("tool_calls"));
}

TEST(ChatConversation, ToolMessagesKeepTheirCallIdAndJoinTextParts) {
  const json messages = {
      {{"role", "tool"},
       {"tool_call_id", "call_1"},
       {"content",
        {{{"type", "text"}, {"text", "18 C"}}, {{"type", "input_text"}, {"text", "sunny"}}}}}};
  const ojson out = template_conversation(messages);
  EXPECT_EQ(out[0]["content"], "18 C\nsunny");
  EXPECT_EQ(out[0]["tool_call_id"], "call_1");
}

TEST(ChatConversation, ReasoningIsPassedUnderBothNames) {
  const ojson a = template_conversation(
      {{{"role", "assistant"}, {"content", "4"}, {"reasoning_content", "2+2"}}});
  EXPECT_EQ(a[0]["reasoning"], "2+2");
  EXPECT_EQ(a[0]["reasoning_content"], "2+2");
  const ojson b =
      template_conversation({{{"role", "assistant"}, {"content", "4"}, {"reasoning", "r"}}});
  EXPECT_EQ(b[0]["reasoning_content"], "r");
}

TEST(ChatConversation, OnlyTheKeysVllmPassesOnRemain) {
  const json messages = {
      {{"role", "user"}, {"content", "hi"}, {"name", "bob"}, {"refusal", nullptr}, {"x", 1}},
      {{"role", "developer"}, {"content", "be brief"}},
      {{"role", "assistant"}, {"content", "ok"}, {"audio", nullptr}, {"function_call", nullptr}}};
  const ojson out = template_conversation(messages);
  EXPECT_EQ(out[0], (ojson{{"role", "user"}, {"content", "hi"}, {"name", "bob"}}));
  EXPECT_EQ(out[1], (ojson{{"role", "developer"}, {"content", "be brief"}, {"tools", nullptr}}));
  EXPECT_EQ(out[2], (ojson{{"role", "assistant"}, {"content", "ok"}}));
}

TEST(ChatConversation, ContentAsPartsForRenderersThatJoinThem) {
  const json messages = {
      {{"role", "user"}, {"content", {"a", {{"type", "input_text"}, {"text", "b"}}}}},
      {{"role", "system"}, {"content", "s"}},
      {{"role", "assistant"}, {"content", nullptr}},
      {{"role", "tool"}, {"content", {{{"type", "text"}, {"text", "x"}}, "y"}}}};
  const ojson out = template_conversation(messages, ArgumentsForm::kObject, ContentForm::kParts);
  const auto text = [](const char* t) { return ojson{{"type", "text"}, {"text", t}}; };
  EXPECT_EQ(out[0]["content"], ojson::array({text("a"), text("b")}));
  EXPECT_EQ(out[1]["content"], ojson::array({text("s")}));
  EXPECT_EQ(out[2]["content"], ojson::array());
  EXPECT_EQ(out[3]["content"], "x\ny");  // tool results stay one string, as in vLLM
}

}  // namespace
}  // namespace kestrel::server
