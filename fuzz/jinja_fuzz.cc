// libFuzzer target: the chat-template engine. Arbitrary bytes are parsed as a template and,
// when they parse, rendered over a small fixed conversation with tight limits, so hostile
// templates must fail with an error rather than crash, hang or exhaust memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const auto ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "caf\u00e9 \ud83d\ude00"}]},
      {"role": "assistant", "content": null, "reasoning_content": " think ",
       "tool_calls": [{"type": "function",
                       "function": {"name": "f", "arguments": {"a": 1, "b": [true, 2.5]}}}]},
      {"role": "tool", "content": "<tool_response>ok</tool_response>"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = kestrel::chat::ChatTemplate::parse(source);
  if (!t.ok()) return 0;
  kestrel::chat::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_collection = 1 << 16;
  limits.max_steps = 1 << 16;
  limits.max_call_depth = 16;
  (void)t->render(context(), limits);
  return 0;
}
