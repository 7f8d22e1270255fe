#include "server/http/json_error.h"

#include <nlohmann/json.hpp>

namespace kestrel::server {

std::string json_error_body(int code, std::string_view type, std::string_view message) {
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(type)},
                          {"param", nullptr},
                          {"code", code}};
  // Replace invalid UTF-8 rather than throw: messages may quote user input.
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

std::string internal_error_body() {
  return json_error_body(500, "InternalServerError", "Internal server error");
}

}  // namespace kestrel::server
