// Error bodies: {"error":{"message","type","param","code"}} with vLLM's types and codes.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {
namespace {

TEST(ProtocolError, BodyShape) {
  auto body = error_body(bad_request("temperature must be a number", "temperature"));
  ASSERT_TRUE(body.is_object());
  ASSERT_EQ(body.size(), 1u);
  auto& e = body.at("error");
  std::vector<std::string> keys;
  for (auto it = e.begin(); it != e.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"message", "type", "param", "code"}));
  EXPECT_EQ(e["message"], "temperature must be a number");
  EXPECT_EQ(e["type"], "BadRequestError");
  EXPECT_EQ(e["param"], "temperature");
  EXPECT_TRUE(e["code"].is_number_integer());
  EXPECT_EQ(e["code"], 400);
}

TEST(ProtocolError, NullParam) {
  auto body = error_body(internal_error("engine died"));
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(body["error"]["code"], 500);
  EXPECT_EQ(body["error"]["type"], "InternalServerError");
}

TEST(ProtocolError, Helpers) {
  const ProtocolError nf = model_not_found("llama");
  EXPECT_EQ(nf.code, 404);
  EXPECT_EQ(nf.type, "NotFoundError");
  EXPECT_EQ(nf.message, "The model `llama` does not exist.");
  EXPECT_EQ(nf.param, "model");
  EXPECT_EQ(not_found("no route").code, 404);
  EXPECT_EQ(unauthorized().code, 401);
  EXPECT_EQ(not_implemented("beam search").code, 501);
  EXPECT_EQ(not_implemented("beam search").type, "NotImplementedError");
  EXPECT_EQ(bad_request("x").code, 400);
  EXPECT_FALSE(bad_request("x").param);
  EXPECT_EQ(api_key_rejection_body().dump(), R"({"error":"Unauthorized"})");
}

TEST(ProtocolError, PromptTooLong) {
  const ProtocolError e = prompt_too_long(4000, 200, 4096);
  EXPECT_EQ(e.code, 400);
  EXPECT_EQ(e.param, "input_tokens");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, you requested 200 "
            "output tokens and your prompt contains 4000 input tokens, for a total of 4200 tokens. "
            "Please reduce the length of the input prompt or the number of requested output "
            "tokens.");
}

TEST(ProtocolError, PromptFillingTheContext) {
  const ProtocolError e = prompt_too_long(5000, 16, 4096);
  EXPECT_EQ(e.param, "input_tokens");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, your request has 5000 "
            "input tokens. Please reduce the length of the input messages.");
}

// Regression: a huge max_tokens used to be reported as "a maximum input length of -9991808".
TEST(ProtocolError, HugeMaxTokensIsReportedAsRequested) {
  const ProtocolError e = prompt_too_long(8, 9223372036854775807, 2048);
  EXPECT_NE(e.message.find("you requested 9223372036854775807 output tokens"), std::string::npos);
  EXPECT_NE(e.message.find("for a total of 9223372036854775815 tokens"), std::string::npos);
  EXPECT_EQ(e.message.find('-'), std::string::npos) << e.message;
}

}  // namespace
}  // namespace kestrel::server
