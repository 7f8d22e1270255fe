// server/protocol/completion_request.h — POST /v1/completions request body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/unread_fields.h"

namespace kestrel::server {

// One prompt: text to tokenize, or token ids given by the client.
using PromptInput = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  std::optional<std::string> model;
  // `prompt` normalised: a string, a list of strings, a list of token ids or a list of token-id
  // lists all become a non-empty list of non-empty prompts.
  std::vector<PromptInput> prompts;
  bool echo = false;
  std::optional<int64_t> best_of;
  bool add_special_tokens = true;
  // sampling.max_tokens is 16 unless given, unset for an explicit null (the rest of the context,
  // as in vLLM); it may be 0 only with echo, which
  // returns the prompt without generating.
  SamplingFields sampling;
  // Top-level keys Kestrel does not read, for the server to log.
  UnreadFields unread;
};

ParseResult<CompletionRequest> parse_completion_request(const nlohmann::json& body);

}  // namespace kestrel::server
