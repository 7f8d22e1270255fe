// logit_bias, allowed_token_ids, bad_words, truncate_prompt_tokens and cache_salt as the request
// parsers read them (vocabulary checks happen in the server, which knows the vocabulary).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

json with(const std::string& key, const json& value) {
  json body = {{"prompt", "hello"}};
  body[key] = value;
  return body;
}

TEST(ProtocolTokenRules, LogitBiasKeysAreTokenIdsAndBiasesAreClamped) {
  const auto r = parse_completion_request(
      with("logit_bias", {{"50256", -100}, {" 7 ", 2.5}, {"+3", 150}, {"-1", -300}}));
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto bias = r.value().sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int64_t, double>>{
                      {-1, -100.0}, {3, 100.0}, {7, 2.5}, {50256, -100.0}}));
}

TEST(ProtocolTokenRules, LogitBiasErrors) {
  expect_bad_request(parse_completion_request(with("logit_bias", {{"abc", 1}})), "logit_bias",
                     "'abc'");
  expect_bad_request(parse_completion_request(with("logit_bias", {{"12", "x"}})), "logit_bias",
                     "must be a number");
  expect_bad_request(parse_completion_request(with("logit_bias", json::array({1}))), "logit_bias",
                     "an object");
}

TEST(ProtocolTokenRules, AllowedTokenIds) {
  const auto r = parse_chat_request(
      {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"allowed_token_ids", {5, 9}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().sampling.allowed_token_ids, (std::vector<int64_t>{5, 9}));
  expect_bad_request(parse_completion_request(with("allowed_token_ids", json::array())),
                     "allowed_token_ids", "empty");
  expect_bad_request(parse_completion_request(with("allowed_token_ids", {"a"})),
                     "allowed_token_ids", "token ids");
}

TEST(ProtocolTokenRules, BadWords) {
  const auto r = parse_completion_request(with("bad_words", {"foo", " bar baz"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.bad_words, (std::vector<std::string>{"foo", " bar baz"}));
  expect_bad_request(parse_completion_request(with("bad_words", "foo")), "bad_words",
                     "array of strings");
}

TEST(ProtocolTokenRules, Truncation) {
  const auto r = parse_completion_request(with("truncate_prompt_tokens", 8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.truncate_prompt_tokens, 8);
  EXPECT_TRUE(r.value().sampling.truncate_left);
  json body = with("truncate_prompt_tokens", -1);
  body["truncation_side"] = "right";
  const auto right = parse_completion_request(body);
  ASSERT_TRUE(right.ok());
  EXPECT_FALSE(right.value().sampling.truncate_left);
  expect_bad_request(parse_completion_request(with("truncate_prompt_tokens", -2)),
                     "truncate_prompt_tokens", "-1 or non-negative");
  expect_bad_request(parse_completion_request(with("truncation_side", "middle")), "truncation_side",
                     "'left' or 'right'");
}

TEST(ProtocolTokenRules, CacheSalt) {
  const auto r = parse_completion_request(with("cache_salt", "s3cr3t"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.cache_salt, "s3cr3t");
  for (const json& bad : {json(""), json("a/b"), json("a@b"), json(std::string(129, 'x')), json(5)})
    expect_bad_request(parse_completion_request(with("cache_salt", bad)), "cache_salt",
                       "cache_salt");
}

}  // namespace
}  // namespace kestrel::server
