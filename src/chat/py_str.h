// chat/py_str.h — Python str semantics over UTF-8: Python indexes, slices and strips by code
// point, so these helpers decode to code points where that matters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace kestrel::chat {

// Invalid bytes decode to U+FFFD (JSON input is valid UTF-8; template bytes may not be).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);

// str.isspace() for one code point (Unicode White_Space plus the \x1c-\x1f separators).
bool py_isspace(char32_t cp);
// str.isprintable() for one code point, for repr(); covers the categories chat text meets.
bool py_isprintable(char32_t cp);

// str.strip/lstrip/rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split(sep, maxsplit); sep == nullopt splits on runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count);
// s[start:stop:step] with Python's clamping; absent bounds are nullopt.
std::string py_slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                     std::optional<int64_t> step);
// Indexes Python's slice visits for a sequence of `len` items.
std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace kestrel::chat
