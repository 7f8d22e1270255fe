// server/http/router.h — (method, exact path) → handler, with 404/405 and 500-on-throw.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "server/http/request.h"
#include "server/http/responder.h"

namespace kestrel::server {

using Handler = std::function<void(const HttpRequest&, std::shared_ptr<Responder>)>;

class Router {
 public:
  // Registers or replaces the handler for `method` (exact, e.g. "POST") on `path`.
  void add(std::string method, std::string path, Handler handler);

  // Runs the matching handler; unknown paths get 404, known paths with another method 405 with
  // an Allow header. A handler that throws gets a generic 500 (what() is logged only).
  void dispatch(const HttpRequest& request, const std::shared_ptr<Responder>& responder) const;

 private:
  std::map<std::string, std::map<std::string, Handler>, std::less<>> routes_;
};

}  // namespace kestrel::server
