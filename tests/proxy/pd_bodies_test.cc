// The PD proxy's request and response rewrites: what a prefill and a decode instance are sent,
// the recompute continuation, the cached-token patch.
#include "proxy/pd_bodies.h"

#include <gtest/gtest.h>

namespace kestrel::proxy {
namespace {

TEST(PdBodies, PrefillAsksForOneTokenNotStreamedWithTheKvKept) {
  const Json client = Json::parse(
      R"({"model":"m","prompt":"hi","max_tokens":50,"max_completion_tokens":50,"stream":true,
          "stream_options":{"include_usage":true},"temperature":0})");
  const Json p = prefill_body(client);
  EXPECT_EQ(p["stream"], false);
  EXPECT_EQ(p["max_tokens"], 1);
  EXPECT_EQ(p["min_tokens"], 1);
  EXPECT_EQ(p["max_completion_tokens"], 1);
  EXPECT_FALSE(p.contains("stream_options"));
  EXPECT_EQ(p["kv_transfer_params"]["do_remote_decode"], true);
  EXPECT_EQ(p["kv_transfer_params"]["do_remote_prefill"], false);
  EXPECT_TRUE(p["kv_transfer_params"]["remote_host"].is_null());
  EXPECT_EQ(p["temperature"], 0);  // the rest as sent
  EXPECT_EQ(p["prompt"], "hi");
  // No max_completion_tokens appears where the client gave none.
  EXPECT_FALSE(prefill_body(Json::parse(R"({"prompt":"x"})")).contains("max_completion_tokens"));
}

TEST(PdBodies, DecodeCarriesTheParamsAndAsksAStreamForUsage) {
  const Json params = Json::parse(R"({"do_remote_prefill":true,"remote_port":5})");
  bool forced = false;
  const Json d = decode_body(Json::parse(R"({"prompt":"x","stream":true})"), params, &forced);
  EXPECT_EQ(d["kv_transfer_params"], params);
  EXPECT_EQ(d["stream_options"]["include_usage"], true);
  EXPECT_TRUE(forced);
  const Json asked = decode_body(
      Json::parse(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})"),
      params, &forced);
  EXPECT_FALSE(forced);
  EXPECT_EQ(asked["stream_options"]["include_usage"], true);
  const Json plain = decode_body(Json::parse(R"({"prompt":"x"})"), params, &forced);
  EXPECT_FALSE(forced);
  EXPECT_FALSE(plain.contains("stream_options"));
}

TEST(PdBodies, EstimatesAndLimits) {
  EXPECT_EQ(estimate_prompt_tokens(Json::parse(R"({"prompt":"abcdefgh"})")), 2);
  EXPECT_EQ(estimate_prompt_tokens(Json::parse(R"({"prompt":[1,2,3,4,5]})")), 5);
  EXPECT_EQ(
      estimate_prompt_tokens(Json::parse(
          R"({"messages":[{"role":"user","content":"abcd"},{"role":"user","content":[{"type":"text","text":"abcdefgh"}]}]})")),
      3);
  EXPECT_EQ(estimate_prompt_tokens(Json::parse(R"({"prompt":""})")), 1);
  EXPECT_EQ(max_output_tokens(Json::parse(R"({"max_tokens":7})"), 99), 7);
  EXPECT_EQ(max_output_tokens(Json::parse(R"({"max_tokens":7,"max_completion_tokens":3})"), 99), 3);
  EXPECT_EQ(max_output_tokens(Json::parse(R"({})"), 99), 99);
}

TEST(PdBodies, CompletionContinuesTheTextWithTheBudgetLeft) {
  const Json client = Json::parse(R"({"prompt":"Once","max_tokens":10,"min_tokens":4})");
  auto next = continuation_body(client, ApiKind::kCompletion, " upon a", 3);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ((*next)["prompt"], "Once upon a");
  EXPECT_EQ((*next)["max_tokens"], 7);
  EXPECT_EQ((*next)["min_tokens"], 1);
  // A one-string list is a string; token ids and several prompts cannot be continued.
  auto listed = continuation_body(Json::parse(R"({"prompt":["Once"],"max_tokens":4})"),
                                  ApiKind::kCompletion, " x", 1);
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ((*listed)["prompt"], "Once x");
  EXPECT_FALSE(continuation_body(Json::parse(R"({"prompt":[1,2]})"), ApiKind::kCompletion, "x", 1));
  EXPECT_FALSE(
      continuation_body(Json::parse(R"({"prompt":["a","b"]})"), ApiKind::kCompletion, "x", 1));
  // Never a budget below one token.
  auto spent = continuation_body(Json::parse(R"({"prompt":"a","max_tokens":2})"),
                                 ApiKind::kCompletion, "bc", 5);
  EXPECT_EQ((*spent)["max_tokens"], 1);
}

TEST(PdBodies, ChatContinuesTheAssistantMessage) {
  const Json client = Json::parse(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"max_completion_tokens":9})");
  auto next = continuation_body(client, ApiKind::kChat, "The answer", 2);
  ASSERT_TRUE(next.has_value());
  const Json& m = (*next)["messages"];
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["content"], "s");  // earlier messages keep their structure
  EXPECT_EQ(m[1]["content"], "q");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "The answer");
  EXPECT_EQ((*next)["continue_final_message"], true);
  EXPECT_EQ((*next)["add_generation_prompt"], false);
  EXPECT_EQ((*next)["max_completion_tokens"], 7);
  // A client already continuing its own assistant message: that message grows.
  const Json own = Json::parse(
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Sure,"}],"continue_final_message":true,"add_generation_prompt":false})");
  auto grown = continuation_body(own, ApiKind::kChat, " here", 1);
  ASSERT_EQ((*grown)["messages"].size(), 2u);
  EXPECT_EQ((*grown)["messages"][1]["content"], "Sure, here");
}

TEST(PdBodies, ResponsesAndChunks) {
  Json r = Json::parse(
      R"({"choices":[{"index":0,"text":"ab","finish_reason":"stop","stop_reason":"recomputed"}],
          "usage":{"prompt_tokens":5,"completion_tokens":2}})");
  EXPECT_TRUE(is_recomputed(r));
  EXPECT_EQ(choice_text(r["choices"][0], ApiKind::kCompletion), "ab");
  EXPECT_EQ(cached_tokens(r), 0);
  patch_cached_tokens(r, 4);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(cached_tokens(r), 4);
  Json chunk =
      Json::parse(R"({"choices":[{"index":0,"delta":{"content":"x"},"stop_reason":null}]})");
  EXPECT_FALSE(is_recomputed(chunk));
  EXPECT_EQ(choice_text(chunk["choices"][0], ApiKind::kChat), "x");
  patch_cached_tokens(chunk, 4);  // no usage: untouched
  EXPECT_FALSE(chunk.contains("usage"));
  const Json message = Json::parse(R"({"message":{"role":"assistant","content":"hey"}})");
  EXPECT_EQ(choice_text(message, ApiKind::kChat), "hey");
  EXPECT_FALSE(is_recomputed(Json::parse(R"({"choices":[]})")));
}

}  // namespace
}  // namespace kestrel::proxy
