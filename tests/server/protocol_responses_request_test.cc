// The Responses API request: input items as chat messages, tools and tool_choice as vLLM checks
// them, text.format, include, and the 400s for what Kestrel cannot do.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/responses_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

json with(const json& extra) {
  json body = {{"model", "m"}, {"input", "Hi"}};
  body.update(extra);
  return body;
}

TEST(ResponsesInput, StringInputIsAUserMessage) {
  const auto r = parse_responses_request(with(json::object()));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().input.messages, json::parse(R"([{"role":"user","content":"Hi"}])"));
  EXPECT_FALSE(r.value().input.continue_final);
}

TEST(ResponsesInput, ItemsOfOneTurnMergeIntoOneAssistantMessage) {
  const json input = json::parse(R"([
    {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather?"}]},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
    {"type":"message","role":"assistant","id":"msg_1",
     "content":[{"type":"output_text","text":"Let me check.","annotations":[]}]},
    {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
    {"type":"function_call","call_id":"c2","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},
    {"type":"function_call_output","call_id":"c1","output":"18 C"},
    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"20 C"}]}
  ])");
  const auto r = parse_responses_request(with({{"input", input}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const json& m = r.value().input.messages;
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["reasoning"], "think");
  EXPECT_EQ(m[1]["content"], "Let me check.");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[1]["tool_calls"][1]["id"], "c2");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(m[2], json::parse(R"({"role":"tool","tool_call_id":"c1","content":"18 C"})"));
  EXPECT_EQ(m[3]["content"][0]["text"], "20 C");
}

TEST(ResponsesInput, UnfinishedAssistantMessageIsContinued) {
  const json input = json::parse(R"([{"role":"user","content":"Say hi"},
    {"type":"message","role":"assistant","status":"incomplete",
     "content":[{"type":"output_text","text":"Hel"}]}])");
  const auto r = parse_responses_request(with({{"input", input}}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().input.continue_final);
}

TEST(ResponsesInput, UnsupportedItemsAre400) {
  expect_bad_request(
      parse_responses_request(with({{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}})),
      "input", "Unsupported input item type: item_reference");
  expect_bad_request(
      parse_responses_request(with(
          {{"input",
            {{{"type", "reasoning"}, {"summary", json::array()}, {"encrypted_content", "x"}}}}})),
      "input", "Encrypted content is not supported.");
  expect_bad_request(parse_responses_request(with({{"input", 5}})), "input", "string or a list");
  expect_bad_request(parse_responses_request(json{{"model", "m"}}), "input", "required");
}

TEST(ResponsesRequest, FunctionToolsBecomeChatTools) {
  const auto r = parse_responses_request(with(
      {{"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}},
       {"tool_choice", {{"type", "function"}, {"name", "f"}}}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r.value().tools)[0]["function"]["name"], "f");
  EXPECT_EQ(r.value().tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.value().echo["tool_choice"], (json{{"type", "function"}, {"name", "f"}}));
}

TEST(ResponsesRequest, ToolChoiceWithoutTools) {
  const auto none = parse_responses_request(with({{"tool_choice", "auto"}}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value().tool_choice.mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(none.value().echo["tool_choice"], "none");
  expect_bad_request(parse_responses_request(with({{"tool_choice", "required"}})), "tool_choice",
                     "Tool choice 'required' must be specified with 'tools' parameter.");
  expect_bad_request(
      parse_responses_request(with({{"tool_choice", {{"type", "function"}, {"name", "g"}}}})),
      "tool_choice", "Tool choice 'function' not found in 'tools' parameter.");
}

TEST(ResponsesRequest, HostedToolsAndTemplatesAreRefused) {
  expect_bad_request(parse_responses_request(with({{"tools", {{{"type", "web_search_preview"}}}}})),
                     "tools", "web_search_preview");
  expect_bad_request(parse_responses_request(with({{"prompt", {{"id", "p"}}}})), "prompt",
                     "prompt template is not supported");
  expect_bad_request(parse_responses_request(with({{"background", true}, {"store", false}})),
                     "background", "store");
}

TEST(ResponsesRequest, TextFormatIncludeAndSampling) {
  const auto r = parse_responses_request(with(
      {{"text",
        {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", {{"type", "integer"}}}}}}},
       {"include", {"message.output_text.logprobs"}},
       {"top_logprobs", 3},
       {"max_output_tokens", 7},
       {"temperature", 0.5},
       {"reasoning", {{"effort", "low"}, {"summary", "auto"}}}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ResponsesRequest& q = r.value();
  ASSERT_TRUE(q.sampling.constraint);
  EXPECT_EQ(q.sampling.constraint->kind, OutputConstraint::Kind::kJsonSchema);
  EXPECT_EQ(q.sampling.logprobs, 3);
  EXPECT_EQ(q.sampling.max_tokens, 7);
  EXPECT_EQ(q.sampling.temperature, 0.5);
  EXPECT_EQ(q.reasoning_effort, "low");
  // Logprobs are reported only when included.
  const auto plain = parse_responses_request(with({{"top_logprobs", 3}}));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain.value().sampling.logprobs);
  expect_bad_request(parse_responses_request(with({{"include", {"nope"}}})), "include", "nope");
  expect_bad_request(parse_responses_request(with({{"max_output_tokens", 0}})), "max_output_tokens",
                     "at least 1");
  // Chat/completions fields that mean nothing here are not read (n is not a Responses field).
  const auto n = parse_responses_request(with({{"n", 3}}));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value().sampling.n, 1);
  EXPECT_EQ(n.value().unread.unknown, (std::vector<std::string>{"n"}));
}

}  // namespace
}  // namespace kestrel::server
