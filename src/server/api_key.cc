#include "server/api_key.h"

#include <algorithm>

namespace kestrel::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is read whatever the contents; only the lengths, which
  // the client chose, decide the loop.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

bool bearer_matches(std::optional<std::string_view> authorization, std::string_view key) {
  constexpr std::string_view kScheme = "Bearer ";
  if (!authorization || authorization->substr(0, kScheme.size()) != kScheme) return false;
  return constant_time_equal(authorization->substr(kScheme.size()), key);
}

}  // namespace kestrel::server
