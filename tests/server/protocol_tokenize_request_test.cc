// /tokenize and /detokenize request parsing.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/tokenize_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

json messages() {
  return json::array({{{"role", "user"}, {"content", "Hi"}}});
}

TEST(ProtocolTokenizeRequest, PromptFormDefaults) {
  const auto r = parse_tokenize_request({{"model", "m"}, {"prompt", "Hello world"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value().is_chat);
  EXPECT_EQ(r.value().model, "m");
  EXPECT_EQ(r.value().prompt, "Hello world");
  EXPECT_TRUE(r.value().add_special_tokens);
  EXPECT_FALSE(r.value().return_token_strs);
}

TEST(ProtocolTokenizeRequest, PromptFormOptions) {
  const auto r = parse_tokenize_request(
      {{"prompt", ""}, {"add_special_tokens", false}, {"return_token_strs", true}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().prompt, "");
  EXPECT_FALSE(r.value().add_special_tokens);
  EXPECT_TRUE(r.value().return_token_strs);
}

TEST(ProtocolTokenizeRequest, ChatFormDefaults) {
  const auto r = parse_tokenize_request({{"messages", messages()}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const TokenizeRequest& req = r.value();
  EXPECT_TRUE(req.is_chat);
  EXPECT_EQ(req.messages, messages());
  EXPECT_TRUE(req.add_generation_prompt);
  EXPECT_FALSE(req.continue_final_message);
  EXPECT_FALSE(req.add_special_tokens);
  EXPECT_FALSE(req.chat_template);
  EXPECT_FALSE(req.chat_template_kwargs);
  EXPECT_FALSE(req.tools);
}

TEST(ProtocolTokenizeRequest, ChatFormOptions) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  const auto r = parse_tokenize_request({{"messages", messages()},
                                         {"add_generation_prompt", false},
                                         {"continue_final_message", true},
                                         {"add_special_tokens", true},
                                         {"chat_template", "{{ x }}"},
                                         {"chat_template_kwargs", {{"enable_thinking", true}}},
                                         {"tools", tools}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value().add_generation_prompt);
  EXPECT_TRUE(r.value().continue_final_message);
  EXPECT_TRUE(r.value().add_special_tokens);
  EXPECT_EQ(r.value().chat_template, "{{ x }}");
  EXPECT_EQ(*r.value().tools, tools);
}

TEST(ProtocolTokenizeRequest, Errors) {
  expect_bad_request(parse_tokenize_request({{"model", "m"}}), "prompt",
                     "Either prompt or messages must be provided.");
  expect_bad_request(parse_tokenize_request({{"prompt", 5}}), "prompt", "prompt must be a string");
  expect_bad_request(parse_tokenize_request({{"prompt", {1, 2}}}), "prompt",
                     "prompt must be a string");
  expect_bad_request(parse_tokenize_request({{"messages", json::array({{{"content", "x"}}})}}),
                     "messages", "role must be a string");
  expect_bad_request(
      parse_tokenize_request({{"messages", messages()}, {"continue_final_message", true}}),
      "continue_final_message", "Cannot set both");
  expect_bad_request(parse_tokenize_request({{"messages", messages()}, {"tools", json::array()}}),
                     "tools", "must not be an empty array");
  expect_bad_request(parse_tokenize_request({{"prompt", "x"}, {"add_special_tokens", "yes"}}),
                     "add_special_tokens", "must be a boolean");
  expect_bad_request(parse_tokenize_request({{"prompt", "x"}, {"return_token_strs", 1}}),
                     "return_token_strs", "must be a boolean");
  expect_bad_request(parse_tokenize_request({{"prompt", "x"}, {"model", 1}}), "model",
                     "model must be a string");
}

TEST(ProtocolTokenizeRequest, UnknownFieldsCollected) {
  const auto r = parse_tokenize_request({{"prompt", "x"}, {"extra", 1}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().ignored_fields, std::vector<std::string>{"extra"});
}

TEST(ProtocolDetokenizeRequest, Valid) {
  const auto r = parse_detokenize_request({{"model", "m"}, {"tokens", {9906, 1917, 0}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().model, "m");
  EXPECT_EQ(r.value().tokens, (std::vector<int32_t>{9906, 1917, 0}));
  const auto empty = parse_detokenize_request({{"tokens", json::array()}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().tokens.empty());
}

TEST(ProtocolDetokenizeRequest, Errors) {
  expect_bad_request(parse_detokenize_request({{"model", "m"}}), "tokens", "tokens is required");
  expect_bad_request(parse_detokenize_request({{"tokens", "1 2"}}), "tokens",
                     "tokens must be an array of non-negative integers");
  expect_bad_request(parse_detokenize_request({{"tokens", {1, -1}}}), "tokens",
                     "non-negative integers");
  expect_bad_request(parse_detokenize_request({{"tokens", {1, 2.5}}}), "tokens",
                     "non-negative integers");
  expect_bad_request(parse_detokenize_request({{"tokens", {"1"}}}), "tokens",
                     "non-negative integers");
  expect_bad_request(parse_detokenize_request({{"tokens", {1}}, {"model", false}}), "model",
                     "model must be a string");
  EXPECT_FALSE(parse_detokenize_request(json::array()).ok());
}

}  // namespace
}  // namespace kestrel::server
