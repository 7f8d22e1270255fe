// server/protocol/tokenize_request.h — POST /tokenize and POST /detokenize request bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

// {"prompt": ...} tokenizes text; {"messages": [...]} renders the chat template first.
struct TokenizeRequest {
  std::optional<std::string> model;
  bool is_chat = false;
  std::string prompt;  // !is_chat
  // is_chat: validated messages as sent, plus the template options.
  nlohmann::json messages;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;
  std::optional<nlohmann::json> chat_template_kwargs;
  std::optional<nlohmann::json> tools;
  bool add_special_tokens = true;  // false by default for chat requests
  bool return_token_strs = false;
  std::vector<std::string> ignored_fields;
};

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
  std::vector<std::string> ignored_fields;
};

ParseResult<TokenizeRequest> parse_tokenize_request(const nlohmann::json& body);
ParseResult<DetokenizeRequest> parse_detokenize_request(const nlohmann::json& body);

}  // namespace kestrel::server
