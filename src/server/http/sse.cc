#include "server/http/sse.h"

namespace kestrel::server {

std::string sse_data(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  size_t start = 0;
  while (true) {
    size_t end = data.find_first_of("\r\n", start);
    out += "data: ";
    out += data.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    out += '\n';
    if (end == std::string_view::npos) break;
    // CRLF is one line break.
    start =
        (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n') ? end + 2 : end + 1;
  }
  out += '\n';
  return out;
}

}  // namespace kestrel::server
