// server/protocol/chat_messages.h — validation of chat `messages`, `tools` and `tool_choice`,
// shared by /v1/chat/completions and /tokenize.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

// Checks `messages` is a non-empty array of objects with a string `role`; `content` a string,
// null or an array of text parts; `tool_calls`, `tool_call_id`, `name`, `reasoning` and
// `reasoning_content` of the right shape. Non-text parts (images, audio, ...) are rejected:
// Kestrel serves text-only models.
std::optional<ProtocolError> validate_chat_messages(const nlohmann::json& messages);

// Checks `tools` is a non-empty array of {"type":"function","function":{"name":...}}.
std::optional<ProtocolError> validate_tools(const nlohmann::json& tools);

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string function_name;  // kNamed only
};

// `tool_choice` (nullptr when absent or null) against `tools` (nullptr when absent or null,
// otherwise already validated): "none" by default, "auto" when tools are given without a
// choice; a named function must be one of the tools.
ParseResult<ToolChoice> parse_tool_choice(const nlohmann::json* tool_choice,
                                          const nlohmann::json* tools);

}  // namespace kestrel::server
