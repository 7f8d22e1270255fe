// chat/deepseek_encoding_parts.h — what the DeepSeek-V3.2 and V4 prompt encoders
// (deepseek_v32_encoding.cc, deepseek_v4_encoding.cc) share. Their reference is Python over
// dicts, so messages are read the way Python reads them: an absent key and a JSON null are both
// None, conditions use Python truthiness, and text is spliced in as str() would write it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kestrel::chat::deepseek {

using ojson = nlohmann::ordered_json;

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

// msg.get(key): the value, or nullptr when the key is absent or null.
const ojson* get(const ojson& msg, std::string_view key);
// bool(v); nullptr is None.
bool truthy(const ojson* v);
// str(v) as str.format splices it in: a string as is, None as "None", anything else as its
// Python repr.
std::string str(const ojson* v);
// str(v or "").
std::string str_or_empty(const ojson* v);
// json.dumps(v, ensure_ascii=False).
std::string to_json(const ojson& v);
// The message's role; "" when it has none or it is not a string.
std::string role(const ojson& msg);
// The index of the last user or developer message, -1 when there is none.
int64_t last_user_index(const std::vector<ojson>& messages);

// The JSON lines of a message's OpenAI-style tools: each tool's "function", one per line.
Expected<std::string> tool_schemas(const ojson& tools);
// An assistant message's tool_calls in DSML: the `block` tag (function_calls or tool_calls)
// around one invoke per call, one parameter per argument (strings verbatim, other values as
// JSON).
Expected<std::string> dsml_tool_calls(const ojson& tool_calls, std::string_view block);

// The encoders, over messages as vLLM's tokenizer wrappers hand them on (request tools already
// attached to a system message).
Expected<std::string> encode_v32(const std::vector<ojson>& messages, bool thinking,
                                 bool drop_thinking);
// `effort`: "low", "high" or "max"; nullopt is "low".
Expected<std::string> encode_v4(const std::vector<ojson>& messages, bool thinking,
                                bool drop_thinking, const std::optional<std::string>& effort);

}  // namespace kestrel::chat::deepseek
