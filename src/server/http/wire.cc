#include "server/http/wire.h"

#include <ctime>

#include <fmt/format.h>
#include <boost/beast/http/status.hpp>

#include "base/logging.h"

namespace kestrel::server {

namespace {

bool is_token_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Headers the server owns because they decide message framing or connection reuse.
bool is_framing_header(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
         iequals(name, "Connection") || iequals(name, "Date") || iequals(name, "Server");
}

void add_header(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  out += value;
  out += "\r\n";
}

}  // namespace

bool is_safe_header(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!is_token_char(c)) return false;
  }
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::string http_date(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

std::string format_response_head(const ResponseHead& head) {
  namespace http = boost::beast::http;
  auto reason = http::obsolete_reason(static_cast<http::status>(head.status));
  if (http::int_to_status(head.status) == http::status::unknown) reason = "Unknown";
  std::string out = fmt::format("HTTP/1.{} {} {}\r\n", head.version == 10 ? 0 : 1, head.status,
                                std::string_view(reason.data(), reason.size()));
  add_header(out, "Date", http_date(std::chrono::system_clock::now()));
  add_header(out, "Server", "kestrel");
  if (!head.content_type.empty()) add_header(out, "Content-Type", head.content_type);
  if (head.content_length) add_header(out, "Content-Length", std::to_string(*head.content_length));
  if (head.chunked) add_header(out, "Transfer-Encoding", "chunked");
  if (head.close) {
    add_header(out, "Connection", "close");
  } else if (head.version == 10) {
    add_header(out, "Connection", "keep-alive");
  }
  if (head.extra) {
    for (const auto& [name, value] : *head.extra) {
      if (is_framing_header(name) || iequals(name, "Content-Type") ||
          !is_safe_header(name, value)) {
        KLOG_WARN("dropping response header '{}' set by a handler", name);
        continue;
      }
      add_header(out, name, value);
    }
  }
  out += "\r\n";
  return out;
}

std::string format_chunk(std::string_view data) {
  std::string out = fmt::format("{:x}\r\n", data.size());
  out.reserve(out.size() + data.size() + 2);
  out += data;
  out += "\r\n";
  return out;
}

}  // namespace kestrel::server
