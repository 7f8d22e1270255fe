// Chat prompts under --tokenizer-mode deepseek_v32 / deepseek_v4: the server hands the request
// to DeepSeek's native encoder (chat/deepseek_encoding.h) in the form vLLM's renderers use,
// ignores chat templates, merges the kwargs, and turns the encoder's refusals into 400s.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/prompts.h"
#include "server/protocol/chat_messages.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

const std::string kBos = "<｜begin▁of▁sentence｜>";

ParseResult<std::string> render(chat::DeepSeekEncoding encoding, const json& messages,
                                const json& kwargs = json::object(), const json* tools = nullptr,
                                const json& defaults = json::object()) {
  EXPECT_FALSE(validate_chat_messages(messages));
  ServingContext ctx;  // no chat template: the encoder needs none
  ctx.chat_template_missing = "none here";
  ctx.deepseek_encoding = encoding;
  ctx.default_chat_template_kwargs = defaults;
  ChatPromptOptions o;
  o.messages = &messages;
  o.tools = tools;
  o.chat_template_kwargs = &kwargs;
  o.chat_template = "{{ raise_exception('templates are not used') }}";
  o.continue_final_message = true;  // ignored, as by vLLM's DeepSeek renderers
  return render_chat_prompt(ctx, o);
}

const json kHello = json::array({{{"role", "user"}, {"content", "Hi"}}});

TEST(DeepSeekPrompts, EncoderInsteadOfTemplates) {
  auto v32 = render(chat::DeepSeekEncoding::kV32, kHello);
  ASSERT_TRUE(v32.ok()) << v32.error().message;
  EXPECT_EQ(v32.value(), kBos + "<｜User｜>Hi<｜Assistant｜></think>");
  auto v4 = render(chat::DeepSeekEncoding::kV4, kHello, {{"thinking", false}});
  ASSERT_TRUE(v4.ok()) << v4.error().message;
  EXPECT_EQ(v4.value(), kBos + "<｜User｜>Hi<｜Assistant｜></think>");
}

TEST(DeepSeekPrompts, RequestKwargsOverTheServerDefaults) {
  const json thinking = {{"thinking", true}};
  EXPECT_EQ(render(chat::DeepSeekEncoding::kV32, kHello, json::object(), nullptr, thinking).value(),
            kBos + "<｜User｜>Hi<｜Assistant｜><think>");
  EXPECT_EQ(render(chat::DeepSeekEncoding::kV32, kHello, {{"thinking", false}}, nullptr, thinking)
                .value(),
            kBos + "<｜User｜>Hi<｜Assistant｜></think>");
}

TEST(DeepSeekPrompts, V4JoinsContentPartsWithBlankLines) {
  // vLLM hands V4's encoder the parts (its "openai" content format), V3.2's one string.
  const json messages =
      json::array({{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, "b"}}}});
  EXPECT_EQ(render(chat::DeepSeekEncoding::kV4, messages, {{"thinking", false}}).value(),
            kBos + "<｜User｜>a\n\nb<｜Assistant｜></think>");
  EXPECT_EQ(render(chat::DeepSeekEncoding::kV32, messages).value(),
            kBos + "<｜User｜>a\nb<｜Assistant｜></think>");
}

TEST(DeepSeekPrompts, ToolCallsAndTools) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object"}}}])");
  const json messages = json::parse(R"([
      {"role": "user", "content": "Time?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_time", "arguments": "{\"tz\": \"UTC\", \"n\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "12:00"}])");
  auto prompt = render(chat::DeepSeekEncoding::kV4, messages, {{"thinking", false}}, &tools);
  ASSERT_TRUE(prompt.ok()) << prompt.error().message;
  // The client's JSON-text arguments arrive as an object, written parameter by parameter.
  EXPECT_NE(prompt.value().find("<｜DSML｜parameter name=\"tz\" string=\"true\">UTC</｜DSML｜"
                                "parameter>\n<｜DSML｜parameter name=\"n\" string=\"false\">1<"),
            std::string::npos)
      << prompt.value();
  EXPECT_NE(prompt.value().find("{\"name\": \"get_time\", \"description\": null"),
            std::string::npos);
  EXPECT_TRUE(prompt.value().ends_with(
      "<｜User｜><tool_result>12:00</tool_result><｜Assistant｜></think>"));
}

TEST(DeepSeekPrompts, RefusedConversationsAre400s) {
  const json messages =
      json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "tool"}, {"content", "x"}}});
  auto prompt = render(chat::DeepSeekEncoding::kV32, messages);
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.error().code, 400);
  EXPECT_NE(prompt.error().message.find("tool result"), std::string::npos)
      << prompt.error().message;
}

}  // namespace
}  // namespace kestrel::server
