// server/protocol/responses_input.h — the Responses API's `input` (a string or a list of items)
// turned into chat messages for the chat template, as vLLM builds them: message items pass
// through (assistant text merged into a preceding assistant message that has none), function_call
// items become assistant tool_calls, function_call_output items tool messages, reasoning items an
// assistant message's reasoning. Item types Kestrel cannot render are a 400 naming them.
#pragma once

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

struct ResponsesConversation {
  nlohmann::json messages = nlohmann::json::array();  // chat messages, not yet validated
  // The last item is an assistant message or reasoning still in progress: the model continues it
  // (continue_final_message) instead of starting a new turn.
  bool continue_final = false;
};

// Appends `input`'s messages to `out.messages`.
std::optional<ProtocolError> append_responses_input(const nlohmann::json& input,
                                                    ResponsesConversation& out);

// Appends a finished response's output items (message text and function calls; reasoning is not
// replayed) as the assistant turn that follows its input.
void append_responses_output(const nlohmann::json& output_items, ResponsesConversation& out);

}  // namespace kestrel::server
