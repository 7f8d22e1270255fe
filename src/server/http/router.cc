#include "server/http/router.h"

#include <exception>

#include "base/logging.h"
#include "server/http/json_error.h"

namespace kestrel::server {

namespace {

struct Segment {
  size_t offset;  // where it starts in the path
  std::string_view text;
};

// The non-empty segments between slashes.
std::vector<Segment> split_path(std::string_view path) {
  std::vector<Segment> out;
  size_t at = 0;
  while (at < path.size()) {
    if (path[at] == '/') {
      ++at;
      continue;
    }
    const size_t end = std::min(path.find('/', at), path.size());
    out.push_back({at, path.substr(at, end - at)});
    at = end;
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; a malformed escape is kept as it is.
std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += char(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool is_placeholder(const std::string& segment) {
  return segment.size() >= 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

void Router::add(std::string method, std::string path, Handler handler) {
  if (path.find('{') == std::string::npos) {
    routes_[std::move(path)][std::move(method)] = std::move(handler);
    return;
  }
  for (Template& t : templates_) {
    if (t.path == path) {
      t.methods[std::move(method)] = std::move(handler);
      return;
    }
  }
  Template t{path, {}, {}};
  for (const Segment& seg : split_path(path)) t.segments.emplace_back(seg.text);
  t.methods[std::move(method)] = std::move(handler);
  templates_.push_back(std::move(t));
}

const Router::Template* Router::match(std::string_view path, PathParams& params) const {
  const std::vector<Segment> parts = split_path(path);
  for (const Template& t : templates_) {
    params.clear();
    bool ok = true;
    size_t i = 0;
    for (; ok && i < t.segments.size(); ++i) {
      const std::string& seg = t.segments[i];
      if (i >= parts.size()) {
        ok = false;
      } else if (is_placeholder(seg) && seg[seg.size() - 2] == '*') {
        // The rest of the raw path after the slash that ends the previous segment, slashes
        // included ("/v1/models//abs/path.gguf" names "/abs/path.gguf").
        const size_t from = i == 0 ? 1 : parts[i - 1].offset + parts[i - 1].text.size() + 1;
        params.emplace_back(seg.substr(1, seg.size() - 3), percent_decode(path.substr(from)));
        i = parts.size();
        break;
      } else if (is_placeholder(seg)) {
        params.emplace_back(seg.substr(1, seg.size() - 2), percent_decode(parts[i].text));
      } else {
        ok = seg == parts[i].text;
      }
    }
    if (ok && i == parts.size()) return &t;
  }
  params.clear();
  return nullptr;
}

void Router::run(const Methods& methods, const HttpRequest& request,
                 const std::shared_ptr<Responder>& responder) {
  auto by_method = methods.find(request.method);
  if (by_method == methods.end()) {
    std::string allow;
    for (const auto& [method, handler] : methods) {
      if (!allow.empty()) allow += ", ";
      allow += method;
    }
    responder->respond(
        405, "application/json",
        json_error_body(405, "MethodNotAllowedError",
                        "Method " + request.method + " not allowed on " + request.path),
        {{"Allow", allow}});
    return;
  }
  try {
    by_method->second(request, responder);
  } catch (const std::exception& e) {
    KLOG_ERROR("handler for {} {} threw: {}", request.method, request.path, e.what());
    if (!responder->respond(500, "application/json", internal_error_body())) responder->abort();
  } catch (...) {
    KLOG_ERROR("handler for {} {} threw a non-exception", request.method, request.path);
    if (!responder->respond(500, "application/json", internal_error_body())) responder->abort();
  }
}

void Router::dispatch(const HttpRequest& request,
                      const std::shared_ptr<Responder>& responder) const {
  if (auto by_path = routes_.find(request.path); by_path != routes_.end())
    return run(by_path->second, request, responder);
  PathParams params;
  if (const Template* t = match(request.path, params)) {
    HttpRequest with_params = request;
    with_params.path_params = std::move(params);
    return run(t->methods, with_params, responder);
  }
  responder->respond(
      404, "application/json",
      json_error_body(404, "NotFoundError", "No route for " + request.method + " " + request.path));
}

}  // namespace kestrel::server
