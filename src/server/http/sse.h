// server/http/sse.h — Server-Sent Events framing for streamed completions.
#pragma once

#include <string>
#include <string_view>

namespace kestrel::server {

// One event carrying `data` ("data: <data>\n\n"); a multi-line payload becomes one "data:" line
// per line, as the SSE spec requires.
std::string sse_data(std::string_view data);

// The OpenAI stream terminator.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace kestrel::server
