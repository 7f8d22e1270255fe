// The second turn of every tool-calling agent loop: the assistant message that carried the calls
// (content null, as the openai SDK and LangChain echo it, or absent, as litellm sends it) and
// the tool's result, rendered by each tool-capable chat template of the shared test data.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "server/prompts.h"
#include "server/protocol/chat_messages.h"
#include "test_paths.h"

namespace kestrel::server {
namespace {

using nlohmann::json;

struct Case {
  const char* file;
  // The template renders assistant tool calls of a message whose content is "" (vLLM's
  // normalisation). DeepSeek-V3's original template renders them only for content None, so
  // (as under vLLM) the call itself is left out; Llama 3.1's and SmolLM2's render no tools.
  bool renders_calls;
};

const Case kTemplates[] = {{"deepseek-v3.jinja", false},   {"deepseek-v3.1.jinja", true},
                           {"deepseek-v3.2.jinja", true},  {"llama3.1.jinja", false},
                           {"qwen3.jinja", true},          {"qwen3-coder.jinja", true},
                           {"qwen3-coder-v2.jinja", true}, {"qwen3.5-community.jinja", true},
                           {"smollm2.jinja", false}};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather in a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

json conversation(bool content_key) {
  json assistant = {
      {"role", "assistant"},
      {"tool_calls",
       {{{"id", "call_abc123"},
         {"type", "function"},
         {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}}}}}};
  if (content_key) assistant["content"] = nullptr;
  return json::array(
      {{{"role", "user"}, {"content", "What is the weather in Paris?"}},
       assistant,
       {{"role", "tool"}, {"tool_call_id", "call_abc123"}, {"content", "18 C and sunny"}}});
}

class ToolRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(ToolRoundTrip, RendersTheCallAndItsResult) {
  const std::string path = test::shared_dir() + "/testdata/chat_templates/" + GetParam().file;
  KESTREL_SKIP_IF_ABSENT(path, "the shared chat template");
  auto tmpl = chat::ChatTemplate::parse(read_file(path));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  ServingContext ctx;
  ctx.chat_template = std::move(tmpl.value());
  const json tool_list = tools();
  const json kwargs = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};  // no tokenizer here
  for (const bool content_key : {true, false}) {
    const json messages = conversation(content_key);
    ASSERT_FALSE(validate_chat_messages(messages));
    ChatPromptOptions o;
    o.messages = &messages;
    o.tools = &tool_list;
    o.chat_template_kwargs = &kwargs;
    auto text = render_chat_prompt(ctx, o);
    ASSERT_TRUE(text.ok()) << GetParam().file << (content_key ? " (content null)" : " (no content)")
                           << ": " << text.error().message;
    EXPECT_NE(text.value().find("18 C and sunny"), std::string::npos) << text.value();
    if (GetParam().renders_calls) {
      EXPECT_NE(text.value().find("get_weather"), std::string::npos) << text.value();
      EXPECT_NE(text.value().find("Paris"), std::string::npos) << text.value();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ToolRoundTrip, ::testing::ValuesIn(kTemplates),
                         [](const auto& info) {
                           std::string name = info.param.file;
                           for (char& c : name)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kestrel::server
