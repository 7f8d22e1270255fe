// server/responses_session.h — one /v1/responses request in flight: its engine request read as it
// streams out, split by the reasoning and tool parsers into output items, answered as one
// response object, as the Responses event stream, or (background) stored for GET. A client that
// goes away aborts the engine request; a background one is stopped by cancel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "chat/tool_parsers/tool_parser.h"
#include "engine/engine_client.h"
#include "server/http/responder.h"
#include "server/protocol/chat_messages.h"
#include "server/protocol/responses_api_objects.h"
#include "server/serving_context.h"

namespace kestrel::server {

struct ResponsesSpec {
  GenerateRequest request;  // engine id = the response id
  ResponseHeader header;
  bool stream = false;
  bool background = false;  // answer at once with status "queued"; the store keeps the rest
  bool store = false;       // keep the final object (and `messages`) in ctx.responses_store
  nlohmann::json messages;  // the conversation the prompt was rendered from
  std::shared_ptr<chat::ReasoningParser> reasoning;
  bool include_reasoning = true;
  std::shared_ptr<chat::ToolParser> tool_parser;  // tool_choice "auto" with a tool-call parser
  std::optional<ToolChoice> forced_tools;         // "required" or a named function
  bool parallel_tool_calls = true;
  bool logprobs = false;
  int64_t max_tokens_param = 0;  // for metrics; 0 when the client gave none
};

// Submits the request and answers on `responder`. Errors at submission are answered at once and
// leave nothing in the engine.
void start_response(ServingContext& ctx, std::shared_ptr<Responder> responder, ResponsesSpec spec);

}  // namespace kestrel::server
