// server/protocol/responses_request.h — POST /v1/responses request body (vLLM's
// ResponsesRequest for chat models): the input as chat messages, function tools in the chat
// form, tool_choice, text.format as an output constraint, reasoning effort, store/background, and
// the sampling fields vLLM takes. Hosted tools, prompt templates and other things Kestrel cannot
// do are a 400 naming them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/protocol/chat_messages.h"
#include "server/protocol/protocol_error.h"
#include "server/protocol/responses_input.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/unread_fields.h"

namespace kestrel::server {

struct ResponsesRequest {
  std::optional<std::string> model;
  std::optional<std::string> instructions;  // rendered as the first (system) message
  ResponsesConversation input;              // the new input only (no history)
  std::optional<std::string> previous_response_id;
  std::optional<nlohmann::json> tools;  // function tools in the chat-completions form
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  std::optional<std::string> reasoning_effort;
  bool include_reasoning = true;
  bool include_logprobs = false;  // include has "message.output_text.logprobs"
  bool store = true;
  bool background = false;
  bool truncation_auto = false;
  std::optional<nlohmann::json> chat_template_kwargs;
  // max_output_tokens → max_tokens; top_logprobs → logprobs when included; text.format →
  // constraint; structured_outputs as in chat.
  SamplingFields sampling;
  // Fields the response echoes as they were sent (metadata, user, tools, text, reasoning, ...).
  nlohmann::json echo = nlohmann::json::object();
  UnreadFields unread;
};

ParseResult<ResponsesRequest> parse_responses_request(const nlohmann::json& body);

}  // namespace kestrel::server
