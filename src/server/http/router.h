// server/http/router.h — (method, path) → handler, with 404/405 and 500-on-throw. A path is exact
// ("/v1/models") or a template whose segments may be placeholders: "{id}" matches one segment,
// a final "{id*}" the rest of the path (model names contain '/'). The handler reads the
// percent-decoded values with HttpRequest::path_param(). Exact paths win over templates.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  using Methods = std::map<std::string, Handler>;
  struct Template {
    std::string path;
    std::vector<std::string> segments;
    Methods methods;
  };

  // The template matching `path`, with its placeholders' values.
  const Template* match(std::string_view path, PathParams& params) const;
  static void run(const Methods& methods, const HttpRequest& request,
                  const std::shared_ptr<Responder>& responder);

  std::map<std::string, Methods, std::less<>> routes_;
  std::vector<Template> templates_;
};

}  // namespace kestrel::server
