#include "server/protocol/protocol_error.h"

#include <utility>

#include <fmt/format.h>

#include "server/protocol/responses.h"

namespace kestrel::server {

nlohmann::ordered_json error_body(const ProtocolError& error) {
  nlohmann::ordered_json inner;
  // Messages may quote request text; keep the body serialisable whatever it holds.
  inner["message"] = sanitize_utf8(error.message);
  inner["type"] = error.type;
  inner["param"] = error.param ? nlohmann::ordered_json(sanitize_utf8(*error.param)) : nullptr;
  inner["code"] = error.code;
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body;
}

ProtocolError bad_request(std::string message, std::optional<std::string> param) {
  return ProtocolError{400, "BadRequestError", std::move(message), std::move(param)};
}

ProtocolError model_not_found(const std::string& model) {
  return ProtocolError{404, "NotFoundError", fmt::format("The model `{}` does not exist.", model),
                       "model"};
}

ProtocolError not_found(std::string message) {
  return ProtocolError{404, "NotFoundError", std::move(message), std::nullopt};
}

ProtocolError unauthorized(std::string message) {
  return ProtocolError{401, "UnauthorizedError", std::move(message), std::nullopt};
}

ProtocolError internal_error(std::string message) {
  return ProtocolError{500, "InternalServerError", std::move(message), std::nullopt};
}

ProtocolError not_implemented(std::string message) {
  return ProtocolError{501, "NotImplementedError", std::move(message), std::nullopt};
}

ProtocolError failure_error(const std::string& detail) {
  return internal_error("The engine failed while running this request: " + detail);
}

ProtocolError prompt_too_long(int64_t input_tokens, int64_t max_output_tokens,
                              int64_t context_length) {
  if (input_tokens >= context_length)
    return bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, your request has "
                    "{} input tokens. Please reduce the length of the input messages.",
                    context_length, input_tokens),
        "input_tokens");
  // Both are non-negative and bounded by int64, so the total is printed as a sum that cannot
  // overflow: a max_tokens near INT64_MAX is a realistic client bug.
  const uint64_t total = uint64_t(input_tokens) + uint64_t(max_output_tokens);
  return bad_request(
      fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                  "output tokens and your prompt contains {} input tokens, for a total of {} "
                  "tokens. Please reduce the length of the input prompt or the number of "
                  "requested output tokens.",
                  context_length, max_output_tokens, input_tokens, total),
      "input_tokens");
}

nlohmann::ordered_json api_key_rejection_body() {
  return {{"error", "Unauthorized"}};
}

}  // namespace kestrel::server
