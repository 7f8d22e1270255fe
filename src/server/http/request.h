// server/http/request.h — a parsed HTTP request as handlers see it (plain data, no Beast types).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::server {

// Header fields in arrival order; names keep the sender's spelling.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (header names, methods are compared exactly).
bool iequals(std::string_view a, std::string_view b);

// First value of the header `name` (case-insensitive), or nullopt.
std::optional<std::string_view> find_header(const HeaderList& headers, std::string_view name);

// Values of a route template's placeholders, e.g. {"id", "resp_1"}.
using PathParams = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ... exactly as sent
  std::string target;  // request-target as sent, e.g. "/v1/models?x=1"
  std::string path;    // target up to '?'
  std::string query;   // target after '?', not decoded; empty if none
  int version = 11;    // 10 for HTTP/1.0, 11 for HTTP/1.1
  HeaderList headers;
  std::string body;
  std::string remote_ip;
  uint16_t remote_port = 0;

  PathParams path_params;  // set by the router for template routes

  std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
  std::optional<std::string_view> path_param(std::string_view name) const {
    for (const auto& [k, v] : path_params)
      if (k == name) return v;
    return std::nullopt;
  }
};

}  // namespace kestrel::server
