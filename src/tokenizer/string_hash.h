// tokenizer/string_hash.h — a transparent string hash, so maps keyed by std::string can be
// searched with a std::string_view without building a string.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace kestrel {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace kestrel
