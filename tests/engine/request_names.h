// tests/engine/request_names.h — engine tests name their requests with strings; the engine
// core knows them by dense handles (base/request_table.h). handle(name) is the same handle for
// the same name throughout a test binary and distinct for distinct names; name_of inverts it.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "base/request_table.h"

namespace kestrel::test {

struct RequestNames {
  std::unordered_map<std::string, RequestHandle> handles;
  std::vector<std::string> names;
};

inline RequestNames& request_names() {
  static RequestNames n;
  return n;
}

inline RequestHandle handle(const std::string& name) {
  RequestNames& n = request_names();
  const auto [it, added] = n.handles.emplace(name, RequestHandle(n.names.size()));
  if (added) n.names.push_back(name);
  return it->second;
}

inline std::string name_of(RequestHandle h) {
  const RequestNames& n = request_names();
  return h < n.names.size() ? n.names[h] : "#" + std::to_string(h);
}

}  // namespace kestrel::test
