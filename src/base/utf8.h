// base/utf8.h — UTF-8 boundaries for streaming text out of byte-level tokens.
#pragma once

#include <cstddef>
#include <string_view>

namespace kestrel {

// Length of the longest prefix of `s` that does not end inside an incomplete multi-byte
// sequence. Invalid bytes count as complete (they are passed through, not held back forever).
inline size_t utf8_complete_prefix(std::string_view s) {
  const size_t n = s.size();
  // A sequence is at most 4 bytes: only the last 3 bytes can start an unfinished one.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

}  // namespace kestrel
