// Shared sampling fields, exercised through /v1/completions (and /v1/chat/completions where the
// two differ). Expected defaults and rules are vLLM's (protocol.py / SamplingParams).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol_test_util.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

json body_with(const std::string& key, const json& value) {
  json body = {{"model", "m"}, {"prompt", "hello"}};
  body[key] = value;
  return body;
}

TEST(ProtocolSampling, DefaultsMatchVllm) {
  const auto r = parse_completion_request({{"prompt", "hi"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const SamplingFields& s = r.value().sampling;
  EXPECT_FALSE(s.temperature || s.top_p || s.top_k || s.min_p || s.presence_penalty ||
               s.frequency_penalty || s.repetition_penalty);
  EXPECT_FALSE(s.seed);
  EXPECT_TRUE(s.stop.empty());
  EXPECT_TRUE(s.stop_token_ids.empty());
  EXPECT_FALSE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 0);
  EXPECT_FALSE(s.include_stop_str_in_output);
  EXPECT_TRUE(s.skip_special_tokens);
  EXPECT_TRUE(s.spaces_between_special_tokens);
  EXPECT_EQ(s.n, 1);
  EXPECT_EQ(s.max_tokens, 16);
  EXPECT_FALSE(s.logprobs);
  EXPECT_FALSE(s.prompt_logprobs);
  EXPECT_FALSE(s.stream);
  EXPECT_FALSE(s.stream_options);
  EXPECT_FALSE(s.response_format);
  EXPECT_FALSE(s.user);
  EXPECT_EQ(s.priority, 0);
  EXPECT_FALSE(s.request_id);
  EXPECT_FALSE(s.kv_transfer_params);

  const SamplingValues v = resolve_sampling_values(s);
  EXPECT_EQ(v.temperature, 1.0);
  EXPECT_EQ(v.top_p, 1.0);
  EXPECT_EQ(v.top_k, 0);
  EXPECT_EQ(v.min_p, 0.0);
  EXPECT_EQ(v.presence_penalty, 0.0);
  EXPECT_EQ(v.frequency_penalty, 0.0);
  EXPECT_EQ(v.repetition_penalty, 1.0);
}

TEST(ProtocolSampling, RequestValuesWinOverServerDefaults) {
  const auto r = parse_completion_request(body_with("temperature", 0.25));
  ASSERT_TRUE(r.ok());
  SamplingValues server;
  server.temperature = 0.7;
  server.top_p = 0.8;
  server.top_k = 20;
  const SamplingValues v = resolve_sampling_values(r.value().sampling, server);
  EXPECT_EQ(v.temperature, 0.25);
  EXPECT_EQ(v.top_p, 0.8);
  EXPECT_EQ(v.top_k, 20);
  EXPECT_EQ(v.repetition_penalty, 1.0);
}

TEST(ProtocolSampling, ParsesEveryField) {
  json body = {{"prompt", "p"},
               {"temperature", 0.5},
               {"top_p", 0.9},
               {"top_k", 40},
               {"min_p", 0.05},
               {"presence_penalty", -1.5},
               {"frequency_penalty", 1.25},
               {"repetition_penalty", 1.1},
               {"seed", 1234},
               {"stop", {"END", "\n\n"}},
               {"stop_token_ids", {7, 3, 7, 9}},
               {"ignore_eos", true},
               {"min_tokens", 4},
               {"include_stop_str_in_output", true},
               {"skip_special_tokens", false},
               {"spaces_between_special_tokens", false},
               {"n", 3},
               {"max_tokens", 32},
               {"logprobs", 5},
               {"prompt_logprobs", 2},
               {"user", "u1"},
               {"priority", -3},
               {"request_id", "req-1"},
               {"kv_transfer_params", {{"do_remote_decode", true}}}};
  const auto r = parse_completion_request(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const SamplingFields& s = r.value().sampling;
  EXPECT_EQ(s.temperature, 0.5);
  EXPECT_EQ(s.top_p, 0.9);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.min_p, 0.05);
  EXPECT_EQ(s.presence_penalty, -1.5);
  EXPECT_EQ(s.frequency_penalty, 1.25);
  EXPECT_EQ(s.repetition_penalty, 1.1);
  EXPECT_EQ(s.seed, 1234);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{7, 3, 9}));  // de-duplicated, order kept
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 4);
  EXPECT_TRUE(s.include_stop_str_in_output);
  EXPECT_FALSE(s.skip_special_tokens);
  EXPECT_FALSE(s.spaces_between_special_tokens);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.max_tokens, 32);
  EXPECT_EQ(s.logprobs, 5);
  EXPECT_EQ(s.prompt_logprobs, 2);
  EXPECT_EQ(s.user, "u1");
  EXPECT_EQ(s.priority, -3);
  EXPECT_EQ(s.request_id, "req-1");
  ASSERT_TRUE(s.kv_transfer_params);
  EXPECT_EQ(s.kv_transfer_params->at("do_remote_decode"), true);
}

TEST(ProtocolSampling, StreamOptionsWithStream) {
  json body = body_with("stream", true);
  body["stream_options"] = {{"include_usage", true}};
  body["prompt_logprobs"] = 0;  // 0 is allowed while streaming
  const auto r = parse_completion_request(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r.value().sampling.stream_options);
  EXPECT_TRUE(r.value().sampling.stream_options->include_usage);
  EXPECT_FALSE(r.value().sampling.stream_options->continuous_usage_stats);
}

TEST(ProtocolSampling, SingleStopStringBecomesList) {
  const auto r = parse_completion_request(body_with("stop", "###"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.stop, std::vector<std::string>{"###"});
}

TEST(ProtocolSampling, NullMeansDefault) {
  json body = {{"prompt", "p"}};
  for (const char* key : {"model",
                          "temperature",
                          "top_p",
                          "top_k",
                          "min_p",
                          "presence_penalty",
                          "frequency_penalty",
                          "repetition_penalty",
                          "seed",
                          "stop",
                          "stop_token_ids",
                          "ignore_eos",
                          "min_tokens",
                          "include_stop_str_in_output",
                          "skip_special_tokens",
                          "spaces_between_special_tokens",
                          "n",
                          "max_tokens",
                          "logprobs",
                          "prompt_logprobs",
                          "stream",
                          "stream_options",
                          "response_format",
                          "user",
                          "priority",
                          "request_id",
                          "kv_transfer_params",
                          "echo",
                          "suffix",
                          "best_of",
                          "add_special_tokens"}) {
    body[key] = nullptr;
  }
  const auto r = parse_completion_request(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const SamplingFields& s = r.value().sampling;
  EXPECT_FALSE(s.max_tokens) << "max_tokens null: the rest of the context, as in vLLM";
  EXPECT_EQ(s.n, 1);
  EXPECT_TRUE(s.skip_special_tokens);
  EXPECT_FALSE(s.temperature);
  EXPECT_FALSE(s.stream_options);
  EXPECT_TRUE(r.value().add_special_tokens);
  EXPECT_TRUE(r.value().unread.ignored.empty() && r.value().unread.unknown.empty());
}

TEST(ProtocolSampling, BoundaryValuesAccepted) {
  const std::vector<std::pair<std::string, json>> ok = {{"temperature", 0.0},
                                                        {"temperature", 5.0},
                                                        {"top_p", 1.0},
                                                        {"top_p", 1e-6},
                                                        {"top_k", 0},
                                                        {"top_k", 1},
                                                        {"min_p", 0.0},
                                                        {"min_p", 1.0},
                                                        {"presence_penalty", -2.0},
                                                        {"presence_penalty", 2},
                                                        {"frequency_penalty", -2},
                                                        {"frequency_penalty", 2.0},
                                                        {"repetition_penalty", 1e-3},
                                                        {"n", 16384},
                                                        {"max_tokens", 1},
                                                        {"logprobs", 0},
                                                        {"logprobs", 20},
                                                        {"prompt_logprobs", 20},
                                                        {"seed", INT64_MAX},
                                                        {"seed", INT64_MIN},
                                                        {"n", 2.0},
                                                        {"stream_options", json::object()}};
  for (const auto& [key, value] : ok) {
    const auto r = parse_completion_request(body_with(key, value));
    EXPECT_TRUE(r.ok()) << key << "=" << value.dump() << ": " << r.error().message;
  }
}

TEST(ProtocolSampling, MinusOneMeansOff) {
  json body = body_with("top_k", -1);
  body["seed"] = -1;
  const auto r = parse_completion_request(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().sampling.top_k, 0);
  EXPECT_FALSE(r.value().sampling.seed);
}

struct BadCase {
  std::string key;
  json value;
  std::string param;
  std::string message;
};

TEST(ProtocolSampling, WrongTypesAreRejectedNamingTheField) {
  const std::vector<BadCase> cases = {
      {"temperature", "hot", "temperature", "temperature must be a number"},
      {"temperature", true, "temperature", "temperature must be a number"},
      {"top_p", json::array(), "top_p", "top_p must be a number"},
      {"top_k", 2.5, "top_k", "top_k must be an integer"},
      {"min_p", "0", "min_p", "min_p must be a number"},
      {"presence_penalty", json::object(), "presence_penalty", "must be a number"},
      {"frequency_penalty", "1", "frequency_penalty", "must be a number"},
      {"repetition_penalty", false, "repetition_penalty", "must be a number"},
      {"seed", 1.5, "seed", "seed must be an integer"},
      {"seed", "7", "seed", "seed must be an integer"},
      {"seed", json(UINT64_MAX), "seed", "seed must be an integer"},
      {"stop", 5, "stop", "stop must be a string or an array of strings"},
      {"stop", {"a", 1}, "stop", "stop must be a string or an array of strings"},
      {"stop_token_ids", 3, "stop_token_ids", "stop_token_ids must be"},
      {"stop_token_ids", {1, -2}, "stop_token_ids", "non-negative integer"},
      {"stop_token_ids", {"1"}, "stop_token_ids", "stop_token_ids must be"},
      {"ignore_eos", 1, "ignore_eos", "ignore_eos must be a boolean"},
      {"min_tokens", "2", "min_tokens", "min_tokens must be an integer"},
      {"include_stop_str_in_output", "true", "include_stop_str_in_output", "a boolean"},
      {"skip_special_tokens", 0, "skip_special_tokens", "a boolean"},
      {"spaces_between_special_tokens", "no", "spaces_between_special_tokens", "a boolean"},
      {"n", "2", "n", "n must be an integer"},
      {"n", 1.5, "n", "n must be an integer"},
      {"max_tokens", "16", "max_tokens", "max_tokens must be an integer"},
      {"logprobs", true, "logprobs", "logprobs must be an integer"},
      {"prompt_logprobs", "1", "prompt_logprobs", "prompt_logprobs must be an integer"},
      {"stream", "true", "stream", "stream must be a boolean"},
      {"stream_options", "usage", "stream_options", "stream_options must be an object"},
      {"stream_options", {{"include_usage", "yes"}}, "stream_options", "include_usage"},
      {"response_format", "json", "response_format", "response_format must be an object"},
      {"user", 5, "user", "user must be a string"},
      {"priority", 0.5, "priority", "priority must be an integer"},
      {"request_id", 12, "request_id", "request_id must be a string"},
      {"kv_transfer_params", json::array(), "kv_transfer_params", "must be an object"},
      {"model", 3, "model", "model must be a string"},
      {"echo", "false", "echo", "echo must be a boolean"},
      {"best_of", "2", "best_of", "best_of must be an integer"},
      {"add_special_tokens", 1, "add_special_tokens", "must be a boolean"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.key + "=" + c.value.dump());
    json body = body_with(c.key, c.value);
    if (c.key == "stream_options") body["stream"] = true;
    expect_bad_request(parse_completion_request(body), c.param, c.message);
  }
}

TEST(ProtocolSampling, OutOfRangeValuesAreRejected) {
  const std::vector<BadCase> cases = {
      {"temperature", -0.1, "temperature", "temperature must be non-negative"},
      {"top_p", 0.0, "top_p", "top_p must be in (0, 1]"},
      {"top_p", 1.01, "top_p", "top_p must be in (0, 1]"},
      {"top_k", -2, "top_k", "top_k must be 0 (disable), or at least 1"},
      {"min_p", -0.01, "min_p", "min_p must be in [0, 1]"},
      {"min_p", 1.5, "min_p", "min_p must be in [0, 1]"},
      {"presence_penalty", 2.01, "presence_penalty", "presence_penalty must be in [-2, 2]"},
      {"presence_penalty", -2.5, "presence_penalty", "presence_penalty must be in [-2, 2]"},
      {"frequency_penalty", 3, "frequency_penalty", "frequency_penalty must be in [-2, 2]"},
      {"frequency_penalty", -2.01, "frequency_penalty", "frequency_penalty must be in [-2, 2]"},
      {"repetition_penalty", 0.0, "repetition_penalty", "greater than zero"},
      {"repetition_penalty", -1.0, "repetition_penalty", "greater than zero"},
      {"n", 0, "n", "n must be at least 1, got 0."},
      {"n", -3, "n", "n must be at least 1"},
      {"n", 16385, "n", "n must be at most 16384"},
      {"stop", "", "stop", "stop cannot contain an empty string."},
      {"stop", {"a", ""}, "stop", "stop cannot contain an empty string."},
      {"min_tokens", -1, "min_tokens", "min_tokens must be greater than or equal to 0"},
      {"min_tokens", 17, "min_tokens", "min_tokens must be less than or equal to max_tokens=16"},
      {"max_tokens", 0, "max_tokens", "max_tokens must be at least 1, got 0."},
      {"max_tokens", -5, "max_tokens", "max_tokens must be at least 1"},
      {"logprobs", 21, "logprobs", "logprobs must be between 0 and 20"},
      {"logprobs", -1, "logprobs", "logprobs must be between 0 and 20"},
      {"prompt_logprobs", 21, "prompt_logprobs", "prompt_logprobs must be between 0 and 20"},
      {"prompt_logprobs", -2, "prompt_logprobs", "prompt_logprobs must be between 0 and 20"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.key + "=" + c.value.dump());
    expect_bad_request(parse_completion_request(body_with(c.key, c.value)), c.param, c.message);
  }
}

TEST(ProtocolSampling, GreedyAllowsOnlyOneSequence) {
  json body = body_with("temperature", 0);
  body["n"] = 2;
  expect_bad_request(parse_completion_request(body), "n", "n must be 1 when using greedy sampling");
  body["temperature"] = 0.5;
  EXPECT_TRUE(parse_completion_request(body).ok());
}

TEST(ProtocolSampling, StreamOptionsNeedStream) {
  json body = body_with("stream_options", {{"include_usage", true}});
  expect_bad_request(parse_completion_request(body), "stream_options",
                     "Stream options can only be defined when `stream=True`.");
  body["stream"] = false;
  expect_bad_request(parse_completion_request(body), "stream_options", "`stream=True`");

  json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"stream_options", {{"include_usage", true}}}};
  expect_bad_request(parse_chat_request(chat), "stream_options", "`stream=True`");
  chat["stream"] = true;
  EXPECT_TRUE(parse_chat_request(chat).ok());
}

TEST(ProtocolSampling, PromptLogprobsNotWhileStreaming) {
  json body = body_with("stream", true);
  body["prompt_logprobs"] = 1;
  expect_bad_request(parse_completion_request(body), "prompt_logprobs",
                     "`prompt_logprobs` are not available when `stream=True`.");
}

TEST(ProtocolSampling, ResponseFormat) {
  auto parse = [](const json& format) {
    return parse_completion_request(body_with("response_format", format));
  };
  const auto text = parse({{"type", "text"}});
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(text.value().sampling.response_format);
  EXPECT_FALSE(text.value().sampling.response_format->constrains_output());

  const auto object = parse({{"type", "json_object"}});
  ASSERT_TRUE(object.ok());
  EXPECT_TRUE(object.value().sampling.response_format->constrains_output());

  const json schema = {{"type", "json_schema"},
                       {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}}}};
  const auto with_schema = parse(schema);
  ASSERT_TRUE(with_schema.ok());
  EXPECT_EQ(with_schema.value().sampling.response_format->type, "json_schema");
  EXPECT_EQ(with_schema.value().sampling.response_format->spec, schema);

  expect_bad_request(parse({{"type", "json_schema"}}), "response_format",
                     "the 'json_schema' field must be provided");
  expect_bad_request(parse({{"type", "xml"}}), "response_format", "got 'xml'");
  expect_bad_request(parse({{"schema", 1}}), "response_format", "response_format.type");
}

}  // namespace
}  // namespace kestrel::server
