// server/forced_tool_calls.h — tool_choice "required" and a named function, enforced by the
// structured-output grammar as vLLM does it: "required" makes the model write a JSON array of
// {"name", "parameters"} objects (one of the tools each), a named function makes it write that
// function's arguments object. The generated JSON is then reported as tool_calls.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/protocol/chat_messages.h"
#include "server/protocol/responses.h"

namespace kestrel::server {

// The JSON Schema the output must follow (`tools` as validated by the request parser);
// `parallel` false allows a single call under "required".
nlohmann::json forced_tool_schema(const ToolChoice& choice, const nlohmann::json& tools,
                                  bool parallel);

// The calls in a finished generation, or nullopt when the text is not the complete JSON the
// schema asked for (a generation cut by max_tokens).
std::optional<std::vector<ToolCallInfo>> forced_tool_calls(const ToolChoice& choice,
                                                           const std::string& text);

}  // namespace kestrel::server
