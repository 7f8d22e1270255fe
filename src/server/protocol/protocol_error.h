// server/protocol/protocol_error.h — OpenAI-style API errors ({"error":{message,type,param,code}}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

namespace kestrel::server {

struct ProtocolError {
  int code = 400;  // HTTP status, also echoed in the body's "code"
  std::string type = "BadRequestError";
  std::string message;
  std::optional<std::string> param;
};

// {"error":{"message":..., "type":..., "param":... | null, "code":...}}
nlohmann::ordered_json error_body(const ProtocolError& error);

ProtocolError bad_request(std::string message, std::optional<std::string> param = std::nullopt);
// 404 for an unknown model name: "The model `X` does not exist.", param "model".
ProtocolError model_not_found(const std::string& model);
ProtocolError not_found(std::string message);
ProtocolError unauthorized(std::string message = "Unauthorized");
ProtocolError internal_error(std::string message);
// 500 for an engine failure while a request ran: "The engine failed while running this request:
// <detail>".
ProtocolError failure_error(const std::string& detail);
ProtocolError not_implemented(std::string message);
// 400 for a prompt that fills the context window, or prompt + requested output beyond it, worded
// as vLLM words it ("This model's maximum context length is N tokens. However, ..."); both counts
// must be non-negative.
ProtocolError prompt_too_long(int64_t input_tokens, int64_t max_output_tokens,
                              int64_t context_length);

// vLLM's --api-key middleware answers 401 with this bare body, not the structured one.
nlohmann::ordered_json api_key_rejection_body();

// A parsed request or the error that rejected it.
template <typename T>
class [[nodiscard]] ParseResult {
 public:
  ParseResult(T value) : v_(std::move(value)) {}
  ParseResult(ProtocolError error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const ProtocolError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ProtocolError> v_;
};

}  // namespace kestrel::server
