// chat/deepseek_encoding.h — chat prompts for the DeepSeek models that ship a prompt encoder
// in Python instead of a Jinja chat template, which vLLM selects with --tokenizer-mode
// deepseek_v32 (DeepSeek-V3.2) and deepseek_v4 (DeepSeek-V4). The encoders are rendered
// natively, byte for byte (chat/deepseek_v32_encoding.cc, chat/deepseek_v4_encoding.cc), and
// take their options from the chat_template_kwargs and the request's tools the way vLLM's
// tokenizer wrappers do:
//   deepseek_v32  thinking when `thinking` or `enable_thinking` is true (default off); the
//                 tools go into a system turn of their own at the start; earlier reasoning is
//                 dropped when the conversation ends with a user turn.
//   deepseek_v4   thinking unless `thinking` / `enable_thinking` say otherwise (default on);
//                 `reasoning_effort` "none" switches it off, "max" and "high" (the default in
//                 thinking mode; any other text too) pick the preamble, "low", "minimal" and
//                 "medium" leave it out; `drop_thinking` (default true); the tools join the
//                 first system turn (one is added at the start when there is none).
// The request's tools are first reduced to what vLLM serialises: each function's name,
// description and parameters (null when absent), and strict and defer_loading when set.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel::chat {

enum class DeepSeekEncoding { kV32, kV4 };

// The encoding a --tokenizer-mode selects; nullopt for modes that render chat templates.
std::optional<DeepSeekEncoding> deepseek_encoding(std::string_view tokenizer_mode);

// `conversation`: the chat messages as vLLM's chat parser hands them on (role; content, a
// string, or for deepseek_v4 also a list of text parts; assistant tool_calls with object
// arguments and reasoning; tool_call_id; tools on developer turns). `tools`: the request's
// OpenAI tools, or null. `kwargs`: the chat_template_kwargs. Conversations the reference
// encoder refuses (unknown roles, tool results without a call, …) are errors.
Expected<std::string> render_deepseek_prompt(DeepSeekEncoding encoding,
                                             const nlohmann::ordered_json& conversation,
                                             const nlohmann::ordered_json* tools,
                                             const nlohmann::ordered_json& kwargs);

}  // namespace kestrel::chat
