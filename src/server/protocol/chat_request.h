// server/protocol/chat_request.h — POST /v1/chat/completions request body.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/chat_messages.h"
#include "server/protocol/protocol_error.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/unread_fields.h"

namespace kestrel::server {

struct ChatCompletionRequest {
  std::optional<std::string> model;
  // Validated, otherwise the request's list exactly as sent, for the chat template.
  nlohmann::json messages;
  std::optional<nlohmann::json> tools;  // validated non-empty array
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  std::optional<std::string> chat_template;
  std::optional<nlohmann::json> chat_template_kwargs;  // object
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  bool echo = false;
  std::optional<nlohmann::json> documents;  // array of objects
  // none | minimal | low | medium | high | xhigh | max: passed to the chat template (and
  // enable_thinking = effort != "none" unless chat_template_kwargs sets it), as vLLM does.
  std::optional<std::string> reasoning_effort;
  bool include_reasoning = true;  // false: reasoning is dropped from the answer
  // logprobs (bool) + top_logprobs land in sampling.logprobs; max_completion_tokens, else
  // max_tokens, in sampling.max_tokens. Structured output asks appear in
  // sampling.response_format (constrains_output()).
  SamplingFields sampling;
  UnreadFields unread;
};

ParseResult<ChatCompletionRequest> parse_chat_request(const nlohmann::json& body);

// Reads add_generation_prompt / continue_final_message and rejects both being true (shared
// with /tokenize).
std::optional<ProtocolError> read_generation_prompt_flags(FieldReader& reader,
                                                          bool& add_generation_prompt,
                                                          bool& continue_final_message);

}  // namespace kestrel::server
