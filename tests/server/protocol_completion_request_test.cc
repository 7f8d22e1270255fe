// /v1/completions request parsing: prompt forms, completion-only fields, unknown fields.
#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/completion_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

ParseResult<CompletionRequest> parse_prompt(const json& prompt) {
  return parse_completion_request({{"model", "m"}, {"prompt", prompt}});
}

TEST(ProtocolCompletionRequest, ValidRequestDefaults) {
  const auto r = parse_completion_request({{"model", "qwen"}, {"prompt", "Once upon"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CompletionRequest& req = r.value();
  EXPECT_EQ(req.model, "qwen");
  ASSERT_EQ(req.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(req.prompts[0]), "Once upon");
  EXPECT_FALSE(req.echo);
  EXPECT_FALSE(req.best_of);
  EXPECT_TRUE(req.add_special_tokens);
  EXPECT_EQ(req.sampling.max_tokens, 16);
  const auto null_max = parse_completion_request({{"prompt", "x"}, {"max_tokens", nullptr}});
  ASSERT_TRUE(null_max.ok());
  EXPECT_FALSE(null_max.value().sampling.max_tokens.has_value()) << "null: the rest of the context";
  EXPECT_TRUE(req.unread.ignored.empty() && req.unread.unknown.empty());
}

TEST(ProtocolCompletionRequest, ModelIsOptional) {
  const auto r = parse_completion_request({{"prompt", "x"}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().model);
}

TEST(ProtocolCompletionRequest, PromptListOfStrings) {
  const auto r = parse_prompt({"a", "bc"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(r.value().prompts[0]), "a");
  EXPECT_EQ(std::get<std::string>(r.value().prompts[1]), "bc");
}

TEST(ProtocolCompletionRequest, PromptTokenIds) {
  const auto r = parse_prompt({1, 0, 2147483647});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().prompts.size(), 1u);
  EXPECT_EQ(std::get<Ids>(r.value().prompts[0]), (Ids{1, 0, 2147483647}));
}

TEST(ProtocolCompletionRequest, PromptListOfTokenIdLists) {
  const auto r = parse_prompt({{5, 6}, {7}});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().prompts.size(), 2u);
  EXPECT_EQ(std::get<Ids>(r.value().prompts[0]), (Ids{5, 6}));
  EXPECT_EQ(std::get<Ids>(r.value().prompts[1]), (Ids{7}));
}

TEST(ProtocolCompletionRequest, PromptIdsAsIntegralFloats) {
  const auto r = parse_prompt(json::parse("[3.0, 4]"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::get<Ids>(r.value().prompts[0]), (Ids{3, 4}));
}

TEST(ProtocolCompletionRequest, MissingOrEmptyPromptRejected) {
  expect_bad_request(parse_completion_request({{"model", "m"}}), "prompt",
                     "Either prompt or prompt_embeds must be provided and non-empty.");
  expect_bad_request(parse_prompt(nullptr), "prompt", "must be provided and non-empty");
  expect_bad_request(parse_prompt(""), "prompt", "must be provided and non-empty");
  expect_bad_request(parse_prompt(json::array()), "prompt", "prompt must not be an empty array");
  expect_bad_request(parse_prompt({"a", ""}), "prompt", "empty string");
  expect_bad_request(parse_prompt({{1}, json::array()}), "prompt", "empty token list");
}

TEST(ProtocolCompletionRequest, MalformedPromptsRejected) {
  const std::vector<json> bad = {
      5,    true,  json::object(), {"a", 1}, {1, "a"},  {{1}, "a"}, {"a", {1}},
      {-1}, {1.5}, {2147483648LL}, {true},   {nullptr}, {{1, -2}},  {{{1}}},
  };
  for (const json& prompt : bad) {
    SCOPED_TRACE(prompt.dump());
    expect_bad_request(parse_prompt(prompt), "prompt", "prompt must be a string");
  }
}

TEST(ProtocolCompletionRequest, SuffixNotSupported) {
  expect_bad_request(parse_completion_request({{"prompt", "x"}, {"suffix", "tail"}}), "suffix",
                     "suffix is not currently supported");
  EXPECT_TRUE(parse_completion_request({{"prompt", "x"}, {"suffix", nullptr}}).ok());
}

TEST(ProtocolCompletionRequest, EchoAllowsZeroMaxTokens) {
  const auto r = parse_completion_request({{"prompt", "x"}, {"echo", true}, {"max_tokens", 0}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r.value().echo);
  EXPECT_EQ(r.value().sampling.max_tokens, 0);
  expect_bad_request(parse_completion_request({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens",
                     "max_tokens must be at least 1");
  expect_bad_request(
      parse_completion_request({{"prompt", "x"}, {"echo", true}, {"max_tokens", -1}}), "max_tokens",
      "max_tokens must be at least 0");
}

TEST(ProtocolCompletionRequest, LogprobsCount) {
  const auto r = parse_completion_request({{"prompt", "x"}, {"logprobs", 3}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.logprobs, 3);
}

TEST(ProtocolCompletionRequest, BestOfAtLeastN) {
  const auto ok = parse_completion_request({{"prompt", "x"}, {"n", 2}, {"best_of", 3}});
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok.value().best_of, 3);
  expect_bad_request(parse_completion_request({{"prompt", "x"}, {"n", 3}, {"best_of", 2}}),
                     "best_of", "best_of must be greater than or equal to n");
}

TEST(ProtocolCompletionRequest, AddSpecialTokens) {
  const auto r = parse_completion_request({{"prompt", "x"}, {"add_special_tokens", false}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().add_special_tokens);
}

TEST(ProtocolCompletionRequest, UnreadFieldsAreSortedForTheLog) {
  const auto r = parse_completion_request({{"prompt", "x"},
                                           {"user", "u"},
                                           {"use_beam_search", false},
                                           {"frobnicate", {1, 2}},
                                           {"temperature", 0.3}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<std::string> ignored = r.value().unread.ignored;
  std::sort(ignored.begin(), ignored.end());
  EXPECT_EQ(ignored, (std::vector<std::string>{"use_beam_search"}));  // user is read
  EXPECT_EQ(r.value().unread.unknown, (std::vector<std::string>{"frobnicate"}));
  EXPECT_EQ(r.value().sampling.temperature, 0.3);
}

// A field that would change the output and that Kestrel does not implement is a 400 naming it.
TEST(ProtocolCompletionRequest, UnimplementedFieldsThatChangeTheOutputAreRefused) {
  const std::vector<std::pair<std::string, json>> refused = {
      {"use_beam_search", true},     {"logprob_token_ids", {1, 2}},
      {"thinking_token_budget", 64}, {"repetition_detection", json::object()},
      {"prompt_embeds", "AAAA"},     {"guided_json", {{"type", "object"}}},
      {"guided_regex", "[a-z]+"},    {"guided_choice", {"a", "b"}},
      {"return_token_ids", true},    {"watermarking", true}};
  for (const auto& [key, value] : refused) {
    const auto r = parse_completion_request({{"prompt", "x"}, {key, value}});
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().code, 400);
    EXPECT_EQ(r.error().param, key);
    EXPECT_NE(r.error().message.find(key), std::string::npos) << r.error().message;
  }
  // Their no-op values are accepted.
  const auto ok = parse_completion_request({{"prompt", "x"},
                                            {"use_beam_search", false},
                                            {"thinking_token_budget", -1},
                                            {"guided_json", nullptr},
                                            {"logprob_token_ids", nullptr}});
  EXPECT_TRUE(ok.ok()) << ok.error().message;
}

TEST(ProtocolCompletionRequest, BodyMustBeAnObject) {
  for (const json& body : {json::array(), json("text"), json(3), json(nullptr)}) {
    const auto r = parse_completion_request(body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, 400);
    EXPECT_FALSE(r.error().param);
  }
}

}  // namespace
}  // namespace kestrel::server
