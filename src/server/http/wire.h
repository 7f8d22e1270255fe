// server/http/wire.h — bytes of HTTP/1.x responses: status line and headers, chunk framing.
// Responses are written as pre-formatted strings so streamed chunks can be queued and written
// back to back without re-serializing.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/http/request.h"

namespace kestrel::server {

struct ResponseHead {
  int status = 200;
  int version = 11;                      // of the request: 10 or 11
  std::string_view content_type;         // empty: no Content-Type
  std::optional<size_t> content_length;  // nullopt: none (streams)
  bool chunked = false;                  // Transfer-Encoding: chunked
  bool close = false;                    // server closes after this response
  const HeaderList* extra = nullptr;     // handler headers; unsafe or framing ones are dropped
};

// Status line, headers (with Date and Server) and the blank line.
std::string format_response_head(const ResponseHead& head);

// One chunk of a chunked body; `data` must not be empty (that would end the body).
std::string format_chunk(std::string_view data);

// Ends a chunked body (no trailers).
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// RFC 7231 IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(std::chrono::system_clock::time_point t);

// A name that is an RFC 7230 token and a value free of CR, LF and NUL.
bool is_safe_header(std::string_view name, std::string_view value);

}  // namespace kestrel::server
