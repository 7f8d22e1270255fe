// server/chat_conversation.h — validated chat `messages` turned into the conversation a chat
// template renders, as vLLM's chat_utils builds it (the "string" content format): every message
// gets a string `content` (text parts joined by newlines; null or absent content becomes ""),
// assistant `tool_calls` carry their arguments as objects (clients send JSON strings; see
// ArgumentsForm), `reasoning`
// and `reasoning_content` both hold the message's reasoning, and only the keys vLLM passes on
// remain (role, content, tool_calls, reasoning, reasoning_content, tool_call_id, name, and tools
// on developer messages).
#pragma once

#include <nlohmann/json.hpp>

namespace kestrel::server {

// How tool-call arguments reach the template: as objects (the transformers convention, which
// most templates expect) or as the JSON text the client sent (for templates that concatenate
// them as strings, such as DeepSeek-V3.1's).
enum class ArgumentsForm { kObject, kText };

// How content reaches the renderer: one string (vLLM's "string" content format), or a list of
// {"type": "text", "text": …} parts (its "openai" format, which DeepSeek-V4's encoder joins
// itself), where null or absent content is an empty list. Tool results are strings either way.
enum class ContentForm { kString, kParts };

// `messages` must have passed validate_chat_messages().
nlohmann::ordered_json template_conversation(const nlohmann::json& messages,
                                             ArgumentsForm arguments = ArgumentsForm::kObject,
                                             ContentForm content = ContentForm::kString);

// Whether some assistant tool call carries its arguments as JSON text (the two forms differ).
bool has_text_arguments(const nlohmann::json& messages);

}  // namespace kestrel::server
