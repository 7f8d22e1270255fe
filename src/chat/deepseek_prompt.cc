// The options vLLM's DeepSeek tokenizer wrappers derive from a chat request before they run the
// encoders (vllm/tokenizers/deepseek_v32.py and deepseek_v4.py).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "chat/deepseek_encoding.h"
#include "chat/deepseek_encoding_parts.h"

namespace kestrel::chat {
namespace {

using deepseek::get;
using deepseek::ojson;
using deepseek::truthy;

// The tools as vLLM's request model serialises them (FunctionDefinition field order).
ojson serialised_tools(const ojson& tools) {
  ojson out = ojson::array();
  for (const ojson& tool : tools) {
    const ojson* fn = get(tool, "function");
    if (fn == nullptr || !fn->is_object()) {
      out.push_back(tool);  // the encoder refuses it
      continue;
    }
    ojson function = ojson::object();
    function["name"] = fn->contains("name") ? (*fn)["name"] : ojson(nullptr);
    for (const char* key : {"description", "parameters"}) {
      const ojson* v = get(*fn, key);
      function[key] = v != nullptr ? *v : ojson(nullptr);
    }
    if (const ojson* strict = get(*fn, "strict")) function["strict"] = *strict;
    const ojson* defer = get(*fn, "defer_loading");
    if (defer == nullptr) defer = get(tool, "defer_loading");
    if (defer != nullptr) function["defer_loading"] = *defer;
    ojson t = {{"type", "function"}, {"function", std::move(function)}};
    if (const ojson* d = get(tool, "defer_loading")) t["defer_loading"] = *d;
    out.push_back(std::move(t));
  }
  return out;
}

Expected<std::string> render_v32(std::vector<ojson> messages, const ojson* tools,
                                 const ojson& kwargs) {
  const bool thinking = truthy(get(kwargs, "thinking")) || truthy(get(kwargs, "enable_thinking"));
  if (tools != nullptr && !tools->empty())
    messages.insert(messages.begin(), ojson{{"role", "system"}, {"tools", *tools}});
  if (messages.empty()) return make_error("no messages to encode");
  // Earlier reasoning is dropped only when a new user turn asks for the next answer.
  const bool drop = deepseek::role(messages.back()) == "user";
  return deepseek::encode_v32(messages, thinking, drop);
}

Expected<std::string> render_v4(std::vector<ojson> messages, const ojson* tools,
                                const ojson& kwargs) {
  bool thinking = truthy(get(kwargs, "thinking")) || truthy(get(kwargs, "enable_thinking"));
  if (!kwargs.contains("thinking") && !kwargs.contains("enable_thinking")) thinking = true;
  std::optional<std::string> effort;
  const ojson* requested = get(kwargs, "reasoning_effort");
  if (requested == nullptr || !requested->is_string()) {
    if (thinking) effort = "high";
  } else if (*requested == "none") {
    thinking = false;
  } else if (*requested == "max") {
    effort = "max";
  } else if (*requested == "low" || *requested == "minimal" || *requested == "medium") {
    effort = "low";
  } else {
    effort = "high";
  }
  const bool drop = !kwargs.contains("drop_thinking") || truthy(&kwargs["drop_thinking"]);
  if (tools != nullptr && !tools->empty()) {
    auto system = std::find_if(messages.begin(), messages.end(),
                               [](const ojson& m) { return deepseek::role(m) == "system"; });
    if (system == messages.end())
      system = messages.insert(messages.begin(), ojson{{"role", "system"}});
    (*system)["tools"] = *tools;
  }
  return deepseek::encode_v4(messages, thinking, drop, effort);
}

}  // namespace

std::optional<DeepSeekEncoding> deepseek_encoding(std::string_view tokenizer_mode) {
  if (tokenizer_mode == "deepseek_v32") return DeepSeekEncoding::kV32;
  if (tokenizer_mode == "deepseek_v4") return DeepSeekEncoding::kV4;
  return std::nullopt;
}

Expected<std::string> render_deepseek_prompt(DeepSeekEncoding encoding, const ojson& conversation,
                                             const ojson* tools, const ojson& kwargs) {
  if (!conversation.is_array()) return make_error("the messages must be a list");
  if (!kwargs.is_object()) return make_error("chat_template_kwargs must be an object");
  std::vector<ojson> messages(conversation.begin(), conversation.end());
  std::optional<ojson> serialised;
  if (tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return make_error("tools must be a list");
    serialised = serialised_tools(*tools);
  }
  const ojson* t = serialised ? &*serialised : nullptr;
  return encoding == DeepSeekEncoding::kV32 ? render_v32(std::move(messages), t, kwargs)
                                            : render_v4(std::move(messages), t, kwargs);
}

}  // namespace kestrel::chat
