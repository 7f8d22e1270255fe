#include "server/http/router.h"

#include <exception>

#include "base/logging.h"
#include "server/http/json_error.h"

namespace kestrel::server {

void Router::add(std::string method, std::string path, Handler handler) {
  routes_[std::move(path)][std::move(method)] = std::move(handler);
}

void Router::dispatch(const HttpRequest& request,
                      const std::shared_ptr<Responder>& responder) const {
  auto by_path = routes_.find(request.path);
  if (by_path == routes_.end()) {
    responder->respond(404, "application/json",
                       json_error_body(404, "NotFoundError",
                                       "No route for " + request.method + " " + request.path));
    return;
  }
  auto by_method = by_path->second.find(request.method);
  if (by_method == by_path->second.end()) {
    std::string allow;
    for (const auto& [method, handler] : by_path->second) {
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

}  // namespace kestrel::server
