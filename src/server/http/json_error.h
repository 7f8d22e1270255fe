// server/http/json_error.h — OpenAI-shaped error bodies:
// {"error":{"message":...,"type":...,"param":null,"code":<int>}}.
#pragma once

#include <string>
#include <string_view>

namespace kestrel::server {

std::string json_error_body(int code, std::string_view type, std::string_view message);

// The body of every 500 caused by a handler; details go to the log, never to the client.
std::string internal_error_body();

}  // namespace kestrel::server
