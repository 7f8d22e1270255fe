// Response builders: keys, JSON types and values against the OpenAI schema
// (/work/shared/testdata/openai/openapi.yaml) and vLLM's field order.
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/protocol/responses.h"

namespace kestrel::server {
namespace {

using nlohmann::ordered_json;
using Keys = std::vector<std::string>;

Keys keys_of(const ordered_json& object) {
  Keys keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return keys;
}

void expect_has_keys(const ordered_json& object, const Keys& required) {
  ASSERT_TRUE(object.is_object()) << object.dump();
  for (const std::string& key : required) {
    EXPECT_TRUE(object.contains(key)) << "missing " << key << " in " << object.dump();
  }
}

// CompletionUsage.required: prompt_tokens, completion_tokens, total_tokens.
void expect_usage(ordered_json usage, int64_t prompt, int64_t completion, int64_t cached) {
  expect_has_keys(usage, {"prompt_tokens", "completion_tokens", "total_tokens"});
  EXPECT_EQ(keys_of(usage),
            (Keys{"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"}));
  EXPECT_EQ(usage["prompt_tokens"], prompt);
  EXPECT_EQ(usage["completion_tokens"], completion);
  EXPECT_EQ(usage["total_tokens"], prompt + completion);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], cached);
}

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(ProtocolResponses, RequestIds) {
  const std::string a = make_request_id("cmpl");
  const std::string b = make_request_id("cmpl");
  ASSERT_EQ(a.size(), 5u + 32u);
  EXPECT_EQ(a.substr(0, 5), "cmpl-");
  for (const char c : a.substr(5)) EXPECT_TRUE(std::isxdigit(c) && !std::isupper(c)) << a;
  EXPECT_NE(a, b);
  std::set<std::string> many;
  for (int i = 0; i < 1000; ++i) many.insert(make_request_id("chatcmpl"));
  EXPECT_EQ(many.size(), 1000u);
}

TEST(ProtocolResponses, UnixTimeIsPlausible) {
  EXPECT_GT(unix_time_now(), 1700000000);  // after Nov 2023
}

// Expected outputs follow Python's bytes.decode("utf-8", errors="replace").
TEST(ProtocolResponses, SanitizeUtf8) {
  EXPECT_EQ(sanitize_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(sanitize_utf8("h\xC3\xA9llo \xE4\xB8\xAD"), "h\xC3\xA9llo \xE4\xB8\xAD");
  EXPECT_EQ(sanitize_utf8("\xFF"), kReplacement);
  EXPECT_EQ(sanitize_utf8("a\xE4\xB8"), "a" + kReplacement);     // truncated: one U+FFFD
  EXPECT_EQ(sanitize_utf8("a\xC3("), "a" + kReplacement + "(");  // bad continuation
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"),
            kReplacement + kReplacement + kReplacement);              // surrogate
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kReplacement + kReplacement);  // overlong
}

CompletionResponseInfo sample_completion() {
  CompletionResponseInfo info;
  info.id = "cmpl-abc";
  info.created = 1700000123;
  info.model = "qwen";
  CompletionChoice c0;
  c0.index = 0;
  c0.text = " there";
  c0.finish_reason = "length";
  CompletionChoice c1;
  c1.index = 1;
  c1.text = "!";
  c1.finish_reason = "stop";
  c1.stop_reason = std::string("###");
  CompletionChoice c2;
  c2.index = 2;
  c2.text = "x";
  c2.finish_reason = "stop";
  c2.stop_reason = int64_t{151645};
  info.choices = {c0, c1, c2};
  info.usage = {7, 5, 3};
  return info;
}

TEST(ProtocolResponses, CompletionResponseMatchesSchema) {
  ordered_json r = completion_response(sample_completion());
  // CreateCompletionResponse.required: id, object, created, model, choices.
  expect_has_keys(r, {"id", "object", "created", "model", "choices"});
  EXPECT_EQ(keys_of(r),
            (Keys{"id", "object", "created", "model", "choices", "usage", "kv_transfer_params"}));
  EXPECT_EQ(r["id"], "cmpl-abc");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_TRUE(r["created"].is_number_integer());
  EXPECT_EQ(r["created"], 1700000123);
  EXPECT_EQ(r["model"], "qwen");
  ASSERT_TRUE(r["choices"].is_array());
  ASSERT_EQ(r["choices"].size(), 3u);
  for (auto& choice : r["choices"]) {
    // choices[].required: finish_reason, index, logprobs, text.
    expect_has_keys(choice, {"finish_reason", "index", "logprobs", "text"});
    EXPECT_EQ(keys_of(choice), (Keys{"index", "text", "logprobs", "finish_reason", "stop_reason",
                                     "prompt_logprobs"}));
    EXPECT_TRUE(choice["index"].is_number_integer());
    EXPECT_TRUE(choice["text"].is_string());
    EXPECT_TRUE(choice["logprobs"].is_null());
    EXPECT_TRUE(choice["prompt_logprobs"].is_null());
  }
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(r["choices"][1]["stop_reason"], "###");
  EXPECT_EQ(r["choices"][2]["stop_reason"], 151645);
  EXPECT_TRUE(r["kv_transfer_params"].is_null());
  expect_usage(r["usage"], 7, 5, 3);
}

TEST(ProtocolResponses, CompletionKvTransferParams) {
  CompletionResponseInfo info = sample_completion();
  info.kv_transfer_params = nlohmann::json{{"do_remote_prefill", true}, {"remote_port", 5600}};
  ordered_json r = completion_response(info);
  EXPECT_EQ(r["kv_transfer_params"]["do_remote_prefill"], true);
  EXPECT_EQ(r["kv_transfer_params"]["remote_port"], 5600);
}

TEST(ProtocolResponses, InvalidUtf8TextStillSerialises) {
  CompletionResponseInfo info = sample_completion();
  info.choices[0].text = "cut \xE4\xB8";
  ordered_json r = completion_response(info);
  std::string dumped;
  ASSERT_NO_THROW(dumped = r.dump());
  EXPECT_EQ(r["choices"][0]["text"], "cut " + kReplacement);
}

TEST(ProtocolResponses, CompletionLogprobs) {
  // "Hé" is 2 characters (3 bytes): offsets count characters, as Python's len(str) does.
  const std::vector<TokenLogprobInfo> tokens = {
      {"H\xC3\xA9", -0.5f, {{"H\xC3\xA9", -0.5f}, {"Ha", -1.25f}}},
      {"llo", -std::numeric_limits<float>::infinity(), {{"llo", -2.0f}}},
      {"!", std::nullopt, {}},
  };
  ordered_json lp = completion_logprobs_json(tokens, 10);
  EXPECT_EQ(keys_of(lp), (Keys{"text_offset", "token_logprobs", "tokens", "top_logprobs"}));
  EXPECT_EQ(lp["text_offset"], ordered_json({10, 12, 15}));
  EXPECT_EQ(lp["tokens"], ordered_json({"H\xC3\xA9", "llo", "!"}));
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["token_logprobs"][1], -9999.0);  // -inf has no JSON form
  EXPECT_TRUE(lp["token_logprobs"][2].is_null());
  ASSERT_TRUE(lp["top_logprobs"][0].is_object());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0]["Ha"], -1.25);
  EXPECT_EQ(lp["top_logprobs"][1]["llo"], -2.0);
  EXPECT_TRUE(lp["top_logprobs"][2].is_null());

  CompletionChoice choice;
  choice.text = "Héllo!";
  choice.logprobs = tokens;
  choice.text_offset_start = 10;
  ordered_json chunk = completion_stream_chunk("cmpl-1", 5, "m", {choice});
  EXPECT_EQ(chunk["choices"][0]["logprobs"], lp);
}

TEST(ProtocolResponses, PromptLogprobs) {
  CompletionResponseInfo info = sample_completion();
  info.choices[0].prompt_logprobs = std::vector<PromptPositionLogprobs>{
      {}, {{15339, -1.5f, 3, " world"}, {1917, -0.25f, 1, "!"}}};
  ordered_json r = completion_response(info);
  ordered_json& p = r["choices"][0]["prompt_logprobs"];
  ASSERT_TRUE(p.is_array());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].is_null());
  EXPECT_EQ(keys_of(p[1]), (Keys{"15339", "1917"}));
  EXPECT_EQ(p[1]["15339"]["logprob"], -1.5);
  EXPECT_EQ(p[1]["15339"]["rank"], 3);
  EXPECT_EQ(p[1]["15339"]["decoded_token"], " world");
}

TEST(ProtocolResponses, CompletionStreamChunk) {
  CompletionChoice c;
  c.index = 0;
  c.text = "tok";
  ordered_json chunk = completion_stream_chunk("cmpl-1", 99, "m", {c});
  // Streamed completions share CreateCompletionResponse's shape.
  expect_has_keys(chunk, {"id", "object", "created", "model", "choices"});
  EXPECT_EQ(keys_of(chunk), (Keys{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_TRUE(chunk["usage"].is_null());
  EXPECT_EQ(keys_of(chunk["choices"][0]),
            (Keys{"index", "text", "logprobs", "finish_reason", "stop_reason"}));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());

  ordered_json with_usage = completion_stream_chunk("cmpl-1", 99, "m", {c}, Usage{3, 1, 0});
  expect_usage(with_usage["usage"], 3, 1, 0);
}

ChatResponseInfo sample_chat() {
  ChatResponseInfo info;
  info.id = "chatcmpl-1";
  info.created = 1700000000;
  info.model = "qwen";
  ChatChoice plain;
  plain.index = 0;
  plain.message.content = "Hello!";
  plain.message.reasoning = "User greets.";
  plain.finish_reason = "stop";
  plain.stop_reason = int64_t{151645};
  ChatChoice tool;
  tool.index = 1;
  tool.message.tool_calls = {{"chatcmpl-tool-1", "get_weather", R"({"city":"Oslo"})"}};
  tool.finish_reason = "tool_calls";
  info.choices = {plain, tool};
  info.usage = {20, 9, 16};
  return info;
}

TEST(ProtocolResponses, ChatResponseMatchesSchema) {
  ordered_json r = chat_response(sample_chat());
  // CreateChatCompletionResponse.required: choices, created, id, model, object.
  expect_has_keys(r, {"choices", "created", "id", "model", "object"});
  EXPECT_EQ(keys_of(r), (Keys{"id", "object", "created", "model", "choices", "usage",
                              "prompt_logprobs", "kv_transfer_params"}));
  EXPECT_EQ(r["object"], "chat.completion");
  expect_usage(r["usage"], 20, 9, 16);
  for (auto& choice : r["choices"]) {
    // choices[].required: finish_reason, index, message, logprobs.
    expect_has_keys(choice, {"finish_reason", "index", "message", "logprobs"});
    EXPECT_EQ(keys_of(choice),
              (Keys{"index", "message", "logprobs", "finish_reason", "stop_reason"}));
    // ChatCompletionResponseMessage.required: role, content, refusal.
    expect_has_keys(choice["message"], {"role", "content", "refusal"});
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_TRUE(choice["message"]["refusal"].is_null());
  }
  ordered_json& m0 = r["choices"][0]["message"];
  EXPECT_EQ(keys_of(m0), (Keys{"role", "content", "refusal", "annotations", "audio",
                               "function_call", "tool_calls", "reasoning", "reasoning_content"}));
  EXPECT_EQ(m0["tool_calls"], ordered_json::array()) << "vLLM always sends tool_calls";
  EXPECT_EQ(m0["content"], "Hello!");
  EXPECT_EQ(m0["reasoning"], "User greets.");
  EXPECT_EQ(m0["reasoning_content"], "User greets.");
  EXPECT_EQ(r["choices"][0]["stop_reason"], 151645);

  ordered_json& m1 = r["choices"][1]["message"];
  EXPECT_TRUE(m1["content"].is_null());
  EXPECT_TRUE(m1["reasoning"].is_null());
  ASSERT_TRUE(m1["tool_calls"].is_array());
  ordered_json& call = m1["tool_calls"][0];
  // ChatCompletionMessageToolCall.required: id, type, function{name, arguments}.
  EXPECT_EQ(keys_of(call), (Keys{"id", "type", "function"}));
  EXPECT_EQ(call["id"], "chatcmpl-tool-1");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(keys_of(call["function"]), (Keys{"name", "arguments"}));
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "tool_calls");
}

TEST(ProtocolResponses, ChatLogprobs) {
  const std::vector<TokenLogprobInfo> tokens = {
      {"\xE4", -0.1f, {{"\xE4", -0.1f}, {"a", -3.0f}}},  // first byte of a 3-byte character
      {"b", std::nullopt, {}},
  };
  ordered_json lp = chat_logprobs_json(tokens);
  EXPECT_EQ(keys_of(lp), (Keys{"content", "refusal"}));
  ASSERT_EQ(lp["content"].size(), 2u);
  ordered_json& t0 = lp["content"][0];
  // ChatCompletionTokenLogprob.required: token, logprob, bytes, top_logprobs.
  EXPECT_EQ(keys_of(t0), (Keys{"token", "logprob", "bytes", "top_logprobs"}));
  EXPECT_EQ(t0["token"], kReplacement);
  EXPECT_NEAR(t0["logprob"].get<double>(), -0.1, 1e-6);
  EXPECT_EQ(t0["bytes"], ordered_json({0xE4}));  // raw bytes survive for clients to join
  ASSERT_EQ(t0["top_logprobs"].size(), 2u);
  EXPECT_EQ(keys_of(t0["top_logprobs"][1]), (Keys{"token", "logprob", "bytes"}));
  EXPECT_EQ(t0["top_logprobs"][1]["token"], "a");
  EXPECT_EQ(t0["top_logprobs"][1]["bytes"], ordered_json({97}));
  EXPECT_EQ(lp["content"][1]["logprob"], -9999.0);
  EXPECT_TRUE(lp["content"][1]["top_logprobs"].is_array());
  EXPECT_NO_THROW(lp.dump());

  ChatResponseInfo info = sample_chat();
  info.choices[0].logprobs = tokens;
  EXPECT_EQ(chat_response(info)["choices"][0]["logprobs"], lp);
}

TEST(ProtocolResponses, ChatStreamChunks) {
  ChatStreamChoice first;
  first.delta.role = "assistant";
  first.delta.content = "";
  ordered_json c1 = chat_stream_chunk("chatcmpl-1", 7, "m", {first});
  // CreateChatCompletionStreamResponse.required: choices, created, id, model, object.
  expect_has_keys(c1, {"choices", "created", "id", "model", "object"});
  EXPECT_EQ(keys_of(c1), (Keys{"id", "object", "created", "model", "choices"}));
  EXPECT_EQ(c1["object"], "chat.completion.chunk");
  ordered_json& ch = c1["choices"][0];
  // choices[].required: delta, finish_reason, index.
  expect_has_keys(ch, {"delta", "finish_reason", "index"});
  EXPECT_EQ(keys_of(ch), (Keys{"index", "delta", "logprobs", "finish_reason"}));
  EXPECT_EQ(ch["delta"], ordered_json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(ch["finish_reason"].is_null());

  ChatStreamChoice middle;
  middle.delta.reasoning = "hmm";
  ordered_json c2 = chat_stream_chunk("chatcmpl-1", 7, "m", {middle});
  EXPECT_EQ(keys_of(c2["choices"][0]["delta"]), (Keys{"reasoning", "reasoning_content"}));

  ChatStreamChoice last;
  last.delta.content = "bye";
  last.finish_reason = "stop";
  last.stop_reason = std::string("END");
  ordered_json c3 = chat_stream_chunk("chatcmpl-1", 7, "m", {last}, Usage{4, 2, 0});
  EXPECT_EQ(keys_of(c3["choices"][0]),
            (Keys{"index", "delta", "logprobs", "finish_reason", "stop_reason"}));
  EXPECT_EQ(c3["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c3["choices"][0]["stop_reason"], "END");
  expect_usage(c3["usage"], 4, 2, 0);
}

TEST(ProtocolResponses, ToolCallDeltas) {
  ChatStreamChoice start;
  start.delta.tool_calls = {
      {0, std::string("chatcmpl-tool-9"), std::string("get_weather"), std::string("")}};
  ordered_json first = chat_stream_chunk("c", 1, "m", {start})["choices"][0]["delta"];
  ASSERT_EQ(keys_of(first), Keys{"tool_calls"});
  ordered_json& d0 = first["tool_calls"][0];
  // ChatCompletionMessageToolCallChunk.required: index.
  EXPECT_EQ(keys_of(d0), (Keys{"id", "type", "index", "function"}));
  EXPECT_EQ(d0["type"], "function");
  EXPECT_EQ(d0["function"], ordered_json({{"name", "get_weather"}, {"arguments", ""}}));

  ChatStreamChoice more;
  more.delta.tool_calls = {{0, std::nullopt, std::nullopt, std::string("{\"city\":")}};
  ordered_json d1 = chat_stream_chunk("c", 1, "m", {more})["choices"][0]["delta"];
  EXPECT_EQ(d1["tool_calls"][0],
            ordered_json({{"index", 0}, {"function", {{"arguments", "{\"city\":"}}}}));
}

TEST(ProtocolResponses, UsageChunks) {
  ordered_json chat = usage_chunk(StreamKind::kChat, "chatcmpl-1", 3, "m", {10, 4, 2});
  EXPECT_EQ(keys_of(chat), (Keys{"id", "object", "created", "model", "choices", "usage"}));
  EXPECT_EQ(chat["object"], "chat.completion.chunk");
  EXPECT_TRUE(chat["choices"].is_array());
  EXPECT_TRUE(chat["choices"].empty());
  expect_usage(chat["usage"], 10, 4, 2);
  ordered_json completion = usage_chunk(StreamKind::kCompletion, "cmpl-1", 3, "m", {1, 1, 0});
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_TRUE(completion["choices"].empty());
}

TEST(ProtocolResponses, Models) {
  ordered_json card = model_card("qwen3", 1700000000, "/models/qwen3.gguf", 32768);
  // Model.required: id, object, created, owned_by; the rest are vLLM's ModelCard fields.
  EXPECT_EQ(keys_of(card), (Keys{"id", "object", "created", "owned_by", "root", "parent",
                                 "max_model_len", "permission"}));
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["owned_by"], "kestrel");
  EXPECT_EQ(card["root"], "/models/qwen3.gguf");
  EXPECT_TRUE(card["parent"].is_null());
  EXPECT_EQ(card["max_model_len"], 32768);
  EXPECT_EQ(card["permission"], ordered_json::array());
  ordered_json list = model_list({card});
  EXPECT_EQ(keys_of(list), (Keys{"object", "data"}));
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["data"][0], card);
}

TEST(ProtocolResponses, TokenizeAndDetokenize) {
  ordered_json t = tokenize_response({9906, 1917}, 4096, std::nullopt);
  EXPECT_EQ(keys_of(t), (Keys{"count", "max_model_len", "tokens", "token_strs"}));
  EXPECT_EQ(t["count"], 2);
  EXPECT_EQ(t["tokens"], ordered_json({9906, 1917}));
  EXPECT_TRUE(t["token_strs"].is_null());
  ordered_json s = tokenize_response({1}, 8, std::vector<std::string>{"\xE4"});
  EXPECT_EQ(s["token_strs"], ordered_json({kReplacement}));
  EXPECT_EQ(detokenize_response("Hello world").dump(), R"({"prompt":"Hello world"})");
}

}  // namespace
}  // namespace kestrel::server
