// server/generation_session.h — one API request in flight: its choices' engine requests, read
// as they stream out of the engine and answered either as SSE chunks or, once all choices end,
// as one JSON body. A client that goes away aborts every choice in the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parsers/tool_parser.h"
#include "engine/engine_client.h"
#include "server/http/responder.h"
#include "server/protocol/chat_messages.h"
#include "server/protocol/responses.h"
#include "server/serving_context.h"

namespace kestrel::server {

struct SessionChoice {
  GenerateRequest request;   // engine id must be unique
  std::string echo;          // echo: the prompt text (completions) or the last assistant
                             // message (chat), sent before the output
  int64_t prompt_index = 0;  // choices of one prompt share its usage.prompt_tokens
  std::vector<int32_t> prompt_ids;
  bool echo_logprobs = false;  // logprobs start with the prompt's tokens (echo + logprobs)
  int prompt_logprobs = -1;    // the prompt_logprobs field: -1 none, else top N per position
  bool drop_output = false;    // echo with max_tokens 0: report the prompt only
  // Chat with --reasoning-parser: splits the output into reasoning and content.
  std::shared_ptr<chat::ReasoningParser> reasoning;
  // tool_choice "required" or a named function: the output is the JSON the grammar forced,
  // reported as tool_calls.
  std::optional<ToolChoice> forced_tools;
  // tool_choice "auto" with --tool-call-parser: tool calls are parsed out of the content.
  std::shared_ptr<chat::ToolParser> tool_parser;
};

struct SessionSpec {
  StreamKind kind = StreamKind::kCompletion;
  std::string id;  // response id (cmpl-… / chatcmpl-…)
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool logprobs = false;          // report per-token logprobs
  bool tokens_as_ids = false;     // logprob tokens spelled "token_id:N"
  bool include_reasoning = true;  // false: a reasoning parser's reasoning is dropped
  int64_t max_tokens_param = 0;   // for metrics; 0 when the client gave none
  int64_t n = 1;
  std::vector<SessionChoice> choices;
};

// Submits the choices and answers on `responder` when they produce output. Errors at submission
// (validation, a stopped engine) are answered at once and nothing stays in the engine.
void start_generation(ServingContext& ctx, std::shared_ptr<Responder> responder, SessionSpec spec);

// The token text reported in logprobs: the token decoded alone (partial UTF-8 allowed; the
// response builders repair it), or "token_id:N" without a tokenizer.
std::string logprob_token_text(const Tokenizer* tokenizer, int32_t id);
// A sampled token's logprob and alternatives with their texts (logprob_token_text).
TokenLogprobInfo token_logprob_info(const Tokenizer* tokenizer, const TokenLogprobs& t);

}  // namespace kestrel::server
