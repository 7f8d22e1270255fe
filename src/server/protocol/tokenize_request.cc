#include "server/protocol/tokenize_request.h"

#include <utility>

#include "server/protocol/chat_messages.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/field_reader.h"

namespace kestrel::server {

using nlohmann::json;

ParseResult<TokenizeRequest> parse_tokenize_request(const json& body) {
  if (!body.is_object()) return bad_request("request body must be a JSON object");
  FieldReader reader(body);
  TokenizeRequest req;
  reader.read_string("model", req.model);
  reader.read_bool("return_token_strs", req.return_token_strs);
  if (reader.failed()) return reader.error();

  // vLLM picks the chat form whenever `messages` is there.
  if (const json* messages = reader.get("messages")) {
    req.is_chat = true;
    req.add_special_tokens = false;
    if (auto e = validate_chat_messages(*messages)) return *e;
    req.messages = *messages;
    if (auto e = read_generation_prompt_flags(reader, req.add_generation_prompt,
                                              req.continue_final_message)) {
      return *e;
    }
    reader.read_string("chat_template", req.chat_template);
    reader.read_object("chat_template_kwargs", req.chat_template_kwargs);
    if (const json* tools = reader.get("tools")) {
      if (auto e = validate_tools(*tools)) return *e;
      req.tools = *tools;
    }
  } else {
    std::optional<std::string> prompt;
    reader.read_string("prompt", prompt);
    if (!reader.failed() && !prompt) {
      return bad_request("Either prompt or messages must be provided.", "prompt");
    }
    req.prompt = prompt.value_or("");
  }
  reader.read_bool("add_special_tokens", req.add_special_tokens);
  if (reader.failed()) return reader.error();
  req.ignored_fields = reader.unknown_keys();
  return req;
}

ParseResult<DetokenizeRequest> parse_detokenize_request(const json& body) {
  if (!body.is_object()) return bad_request("request body must be a JSON object");
  FieldReader reader(body);
  DetokenizeRequest req;
  reader.read_string("model", req.model);
  const json* tokens = reader.get("tokens");
  if (reader.failed()) return reader.error();
  if (tokens == nullptr) return bad_request("tokens is required", "tokens");
  if (!tokens->is_array()) return type_error("tokens", "an array of non-negative integers");
  for (const json& item : *tokens) {
    const std::optional<int32_t> id = json_to_token_id(item);
    if (!id) return type_error("tokens", "an array of non-negative integers");
    req.tokens.push_back(*id);
  }
  req.ignored_fields = reader.unknown_keys();
  return req;
}

}  // namespace kestrel::server
