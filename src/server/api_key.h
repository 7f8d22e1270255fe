// server/api_key.h — the --api-key check of /v1 routes: `Authorization: Bearer KEY`, compared in
// time that does not depend on where the first wrong byte is, so a client cannot guess the key
// byte by byte from response times.
#pragma once

#include <optional>
#include <string_view>

namespace kestrel::server {

// Equality of a and b whose duration depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

// Whether an Authorization header value carries `key` ("Bearer <key>").
bool bearer_matches(std::optional<std::string_view> authorization, std::string_view key);

}  // namespace kestrel::server
