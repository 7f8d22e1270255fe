// /v1/chat/completions request parsing: messages, tools, logprobs, token limits, template flags.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/chat_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

json user_messages() {
  return json::array({{{"role", "user"}, {"content", "Hello"}}});
}

json chat_body() {
  return {{"model", "m"}, {"messages", user_messages()}};
}

json chat_with(const std::string& key, const json& value) {
  json body = chat_body();
  body[key] = value;
  return body;
}

json with_message(const json& message) {
  json body = chat_body();
  body["messages"].push_back(message);
  return body;
}

json weather_tools() {
  return json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"description", "Weather for a city"},
          {"parameters",
           {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
}

TEST(ProtocolChatRequest, ValidRequestDefaults) {
  const auto r = parse_chat_request(chat_body());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ChatCompletionRequest& req = r.value();
  EXPECT_EQ(req.model, "m");
  EXPECT_EQ(req.messages, user_messages());
  EXPECT_FALSE(req.tools);
  EXPECT_EQ(req.tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(req.parallel_tool_calls);
  EXPECT_FALSE(req.chat_template);
  EXPECT_FALSE(req.chat_template_kwargs);
  EXPECT_TRUE(req.add_generation_prompt);
  EXPECT_FALSE(req.continue_final_message);
  EXPECT_FALSE(req.add_special_tokens);
  EXPECT_FALSE(req.echo);
  EXPECT_FALSE(req.documents);
  EXPECT_FALSE(req.sampling.max_tokens);  // chat: up to the context window
  EXPECT_FALSE(req.sampling.logprobs);
  EXPECT_TRUE(req.unread.ignored.empty() && req.unread.unknown.empty());
}

TEST(ProtocolChatRequest, MessagesKeptAsSent) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, "there", {"text": "!"}]},
    {"role": "assistant", "content": null, "reasoning_content": "thinking",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"},
    {"role": "assistant", "reasoning": "r", "content": [{"type": "refusal", "refusal": "no"}]},
    {"role": "developer", "content": "custom roles pass"}
  ])");
  const auto r = parse_chat_request({{"messages", messages}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().messages, messages);
}

TEST(ProtocolChatRequest, MalformedMessagesRejected) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "messages must be an array"},
      {json::array(), "messages must not be empty"},
      {json::array({"hi"}), "messages[0] must be an object"},
      {json::array({{{"content", "hi"}}}), "messages[0].role must be a string"},
      {json::array({{{"role", 1}, {"content", "hi"}}}), "messages[0].role must be a string"},
      {json::array({{{"role", "user"}, {"content", 5}}}), "messages[0].content must be a string"},
      {json::array({{{"role", "user"}, {"content", {{"text", "x"}}}}}), "content must be"},
      {json::array({{{"role", "user"}, {"content", {{{"type", "text"}}}}}}),
       "messages[0].content[0].text must be a string"},
      {json::array({{{"role", "user"}, {"content", {{{"type", "text"}, {"text", 3}}}}}}),
       "text must be a string"},
      {json::array({{{"role", "user"}, {"content", {5}}}}), "content[0] must be an object"},
      {json::array({{{"role", "user"}, {"content", {{{"type", 7}}}}}}),
       "content[0].type must be a string"},
      {json::array({{{"role", "user"}, {"content", {{{"type", "banana"}}}}}}),
       "Unknown part type: banana"},
      {json::array({{{"role", "user"}, {"tool_call_id", 5}}}), "tool_call_id must be a string"},
      {json::array({{{"role", "user"}, {"name", false}}}), "messages[0].name must be a string"},
      {json::array({{{"role", "assistant"}, {"reasoning", 1}}}), "reasoning must be a string"},
      {json::array({{{"role", "assistant"}, {"reasoning_content", {1}}}}),
       "reasoning_content must be a string"},
      {json::array({{{"role", "assistant"}, {"tool_calls", "x"}}}), "tool_calls must be an array"},
      {json::array({{{"role", "assistant"}, {"tool_calls", {1}}}}),
       "tool_calls[0] must be an object"},
      {json::array({{{"role", "assistant"}, {"tool_calls", {{{"id", "a"}}}}}}),
       "tool_calls[0].function must be an object"},
      {json::array(
           {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"arguments", "{}"}}}}}}}}),
       "tool_calls[0].function.name must be a string"},
      {json::array({{{"role", "assistant"},
                     {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", 3}}}}}}}}),
       "arguments must be a string or an object"},
      {json::array(
           {{{"role", "assistant"}, {"tool_calls", {{{"id", 3}, {"function", {{"name", "f"}}}}}}}}),
       "tool_calls[0].id must be a string"},
  };
  for (const auto& [messages, message] : cases) {
    SCOPED_TRACE(messages.dump());
    expect_bad_request(parse_chat_request({{"messages", messages}}), "messages", message);
  }
  expect_bad_request(parse_chat_request({{"model", "m"}}), "messages", "messages is required");
}

TEST(ProtocolChatRequest, SecondMessageIsCheckedToo) {
  expect_bad_request(parse_chat_request(with_message({{"role", "user"}, {"content", 1.5}})),
                     "messages", "messages[1].content");
}

TEST(ProtocolChatRequest, NonTextPartsNotSupported) {
  for (const char* type : {"image_url", "input_audio", "video_url", "audio_url"}) {
    SCOPED_TRACE(type);
    const json part = {{"type", type}, {type, {{"url", "http://x/y.png"}}}};
    const json body = {{"messages", {{{"role", "user"}, {"content", {part}}}}}};
    expect_bad_request(parse_chat_request(body), "messages", "not supported");
  }
}

TEST(ProtocolChatRequest, MaxCompletionTokensWinsOverMaxTokens) {
  json body = chat_with("max_tokens", 5);
  auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.max_tokens, 5);
  body["max_completion_tokens"] = 7;
  r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.max_tokens, 7);
  expect_bad_request(parse_chat_request(chat_with("max_completion_tokens", 0)),
                     "max_completion_tokens", "max_completion_tokens must be at least 1, got 0.");
  expect_bad_request(parse_chat_request(chat_with("max_tokens", 0)), "max_tokens",
                     "max_tokens must be at least 1, got 0.");
  expect_bad_request(parse_chat_request(chat_with("max_completion_tokens", "9")),
                     "max_completion_tokens", "must be an integer");
}

TEST(ProtocolChatRequest, MinTokensAgainstMaxCompletionTokens) {
  json body = chat_with("max_completion_tokens", 4);
  body["min_tokens"] = 5;
  expect_bad_request(parse_chat_request(body), "min_tokens", "max_tokens=4");
}

TEST(ProtocolChatRequest, Logprobs) {
  json body = chat_with("logprobs", true);
  auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.logprobs, 0);
  body["top_logprobs"] = 5;
  r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.logprobs, 5);

  r = parse_chat_request(chat_with("top_logprobs", 0));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().sampling.logprobs);

  expect_bad_request(parse_chat_request(chat_with("top_logprobs", 3)), "top_logprobs",
                     "when using `top_logprobs`, `logprobs` must be set to true.");
  json off = chat_with("logprobs", false);
  off["top_logprobs"] = 2;
  expect_bad_request(parse_chat_request(off), "top_logprobs", "`logprobs` must be set to true");
  body["top_logprobs"] = 21;
  expect_bad_request(parse_chat_request(body), "top_logprobs", "between 0 and 20");
  body["top_logprobs"] = -1;
  expect_bad_request(parse_chat_request(body), "top_logprobs", "between 0 and 20");
  expect_bad_request(parse_chat_request(chat_with("logprobs", 1)), "logprobs",
                     "logprobs must be a boolean");
}

TEST(ProtocolChatRequest, ToolsAndDefaultToolChoice) {
  const auto r = parse_chat_request(chat_with("tools", weather_tools()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r.value().tools);
  EXPECT_EQ(*r.value().tools, weather_tools());
  EXPECT_EQ(r.value().tool_choice.mode, ToolChoice::Mode::kAuto);
}

TEST(ProtocolChatRequest, ToolChoiceModes) {
  json body = chat_with("tools", weather_tools());
  body["tool_choice"] = "none";
  EXPECT_EQ(parse_chat_request(body).value().tool_choice.mode, ToolChoice::Mode::kNone);
  body["tool_choice"] = "required";
  EXPECT_EQ(parse_chat_request(body).value().tool_choice.mode, ToolChoice::Mode::kRequired);
  body["tool_choice"] = nullptr;
  EXPECT_EQ(parse_chat_request(body).value().tool_choice.mode, ToolChoice::Mode::kAuto);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const auto named = parse_chat_request(body);
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named.value().tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.value().tool_choice.function_name, "get_weather");
  EXPECT_EQ(parse_chat_request(chat_with("tool_choice", "none")).value().tool_choice.mode,
            ToolChoice::Mode::kNone);
}

TEST(ProtocolChatRequest, ToolChoiceErrors) {
  expect_bad_request(parse_chat_request(chat_with("tool_choice", "auto")), "tool_choice",
                     "When using `tool_choice`, `tools` must be set.");
  json body = chat_with("tools", weather_tools());
  body["tool_choice"] = "sometimes";
  expect_bad_request(parse_chat_request(body), "tool_choice", "Invalid value for `tool_choice`");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  expect_bad_request(parse_chat_request(body), "tool_choice",
                     "The tool specified in `tool_choice` does not match any of the specified "
                     "`tools`");
  body["tool_choice"] = {{"type", "function"}};
  expect_bad_request(parse_chat_request(body), "tool_choice.function",
                     "Invalid value for `function`");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", ""}}}};
  expect_bad_request(parse_chat_request(body), "tool_choice.function.name", "Invalid `name`");
}

TEST(ProtocolChatRequest, MalformedToolsRejected) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "`tools` must not be an empty array"},
      {json::object(), "tools must be an array"},
      {json::array({1}), "tools[0] must be an object"},
      {json::array({{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}),
       "tools[0].type must be \"function\""},
      {json::array({{{"type", "function"}}}), "tools[0].function must be an object"},
      {json::array({{{"function", {{"description", "d"}}}}}),
       "tools[0].function.name must be a string"},
      {json::array({{{"function", {{"name", "f"}, {"parameters", "{}"}}}}}),
       "tools[0].function.parameters must be an object"},
  };
  for (const auto& [tools, message] : cases) {
    SCOPED_TRACE(tools.dump());
    expect_bad_request(parse_chat_request(chat_with("tools", tools)), "tools", message);
  }
}

TEST(ProtocolChatRequest, ParallelToolCallsAndTemplateFields) {
  json body = chat_with("parallel_tool_calls", false);
  body["chat_template"] = "{{ messages }}";
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  body["documents"] = {{{"title", "t"}, {"text", "x"}}};
  body["echo"] = true;
  body["add_special_tokens"] = true;
  const auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value().parallel_tool_calls);
  EXPECT_EQ(r.value().chat_template, "{{ messages }}");
  EXPECT_EQ(*r.value().chat_template_kwargs, json({{"enable_thinking", false}}));
  EXPECT_EQ(*r.value().documents, body["documents"]);
  EXPECT_TRUE(r.value().echo);
  EXPECT_TRUE(r.value().add_special_tokens);

  expect_bad_request(parse_chat_request(chat_with("chat_template_kwargs", "x")),
                     "chat_template_kwargs", "chat_template_kwargs must be an object");
  expect_bad_request(parse_chat_request(chat_with("chat_template", 1)), "chat_template",
                     "chat_template must be a string");
  expect_bad_request(parse_chat_request(chat_with("documents", "doc")), "documents",
                     "documents must be an array of objects");
  expect_bad_request(parse_chat_request(chat_with("documents", {1})), "documents",
                     "documents must be an array of objects");
  expect_bad_request(parse_chat_request(chat_with("parallel_tool_calls", "no")),
                     "parallel_tool_calls", "must be a boolean");
}

TEST(ProtocolChatRequest, GenerationPromptFlags) {
  json body = chat_with("continue_final_message", true);
  body["add_generation_prompt"] = false;
  const auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().continue_final_message);
  EXPECT_FALSE(r.value().add_generation_prompt);

  body["add_generation_prompt"] = true;
  expect_bad_request(parse_chat_request(body), "continue_final_message",
                     "Cannot set both `continue_final_message` and `add_generation_prompt` to "
                     "True.");
  // add_generation_prompt defaults to true, so continuing alone conflicts as well.
  expect_bad_request(parse_chat_request(chat_with("continue_final_message", true)),
                     "continue_final_message", "Cannot set both");
}

TEST(ProtocolChatRequest, StructuredOutputRequestIsFlagged) {
  const auto r = parse_chat_request(chat_with("response_format", {{"type", "json_object"}}));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.value().sampling.response_format);
  EXPECT_TRUE(r.value().sampling.response_format->constrains_output());
}

TEST(ProtocolChatRequest, UnreadFieldsAreSortedForTheLog) {
  json body = chat_with("metadata", {{"k", "v"}});
  body["store"] = true;
  body["frobnicate"] = 1;
  body["n"] = 2;
  const auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok());
  std::vector<std::string> ignored = r.value().unread.ignored;
  std::sort(ignored.begin(), ignored.end());
  EXPECT_EQ(ignored, (std::vector<std::string>{"metadata", "store"}));
  EXPECT_EQ(r.value().unread.unknown, (std::vector<std::string>{"frobnicate"}));
  EXPECT_EQ(r.value().sampling.n, 2);
}

TEST(ProtocolChatRequest, ChatOnlyRefusedFields) {
  const std::vector<std::pair<std::string, json>> refused = {
      {"functions", json::array({{{"name", "f"}}})},
      {"function_call", "auto"},
      {"modalities", {"text", "audio"}},
      {"audio", {{"voice", "alloy"}}},
      {"web_search_options", json::object()},
      {"return_prompt_text", true}};
  for (const auto& [key, value] : refused) {
    const auto r = parse_chat_request(chat_with(key, value));
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().param, key);
  }
  EXPECT_TRUE(parse_chat_request(chat_with("modalities", {"text"})).ok());
}

TEST(ProtocolChatRequest, ReasoningEffortIsCheckedAndKept) {
  const auto r = parse_chat_request(chat_with("reasoning_effort", "low"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().reasoning_effort, "low");
  const auto bad = parse_chat_request(chat_with("reasoning_effort", "extreme"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().param, "reasoning_effort");
  const auto off = parse_chat_request(chat_with("include_reasoning", false));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.value().include_reasoning);
}

TEST(ProtocolChatRequest, NullFieldsMeanDefaults) {
  json body = chat_body();
  for (const char* key :
       {"tools", "tool_choice", "parallel_tool_calls", "chat_template", "chat_template_kwargs",
        "add_generation_prompt", "continue_final_message", "echo", "documents", "logprobs",
        "top_logprobs", "max_tokens", "max_completion_tokens", "temperature"}) {
    body[key] = nullptr;
  }
  const auto r = parse_chat_request(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r.value().add_generation_prompt);
  EXPECT_TRUE(r.value().parallel_tool_calls);
  EXPECT_EQ(r.value().tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_FALSE(r.value().sampling.max_tokens);
  EXPECT_TRUE(r.value().unread.ignored.empty() && r.value().unread.unknown.empty());
}

}  // namespace
}  // namespace kestrel::server
