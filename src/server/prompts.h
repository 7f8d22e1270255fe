// server/prompts.h — turning request inputs into prompt token ids: text through the tokenizer,
// client token ids checked against the vocabulary, chat messages through the chat template.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/completion_request.h"
#include "server/protocol/protocol_error.h"
#include "server/serving_context.h"

namespace kestrel::server {

struct ChatPromptOptions {
  const nlohmann::json* messages = nullptr;
  const nlohmann::json* tools = nullptr;      // may be null
  const nlohmann::json* documents = nullptr;  // may be null
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;              // a request's own template text
  const nlohmann::json* chat_template_kwargs = nullptr;  // may be null
};

// Renders the chat template (the request's, else the model's) over the messages, as
// transformers' apply_chat_template does: text parts of a message's content joined by newlines,
// the tokenizer's special tokens (bos_token, eos_token) and the kwargs as template variables.
// continue_final_message cuts the rendering right after the last message's content. Under
// --tokenizer-mode deepseek_v32 or deepseek_v4 the model's native encoder renders the prompt
// instead (chat/deepseek_encoding.h), ignoring any template, as vLLM does.
ParseResult<std::string> render_chat_prompt(const ServingContext& ctx,
                                            const ChatPromptOptions& options);

// Token ids of one prompt. Text needs a tokenizer; ids must lie in the vocabulary.
ParseResult<std::vector<int32_t>> prompt_token_ids(const ServingContext& ctx,
                                                   const PromptInput& prompt,
                                                   bool add_special_tokens);

// The served name a request addresses: its `model` (404 unless served), else the default.
ParseResult<std::string> resolve_model_name(const ServingContext& ctx,
                                            const std::optional<std::string>& requested);

}  // namespace kestrel::server
