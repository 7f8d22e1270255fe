// tokenizer/utf8_sequence.h — classifying the UTF-8 sequence at the start of a byte string, by
// the Unicode "maximal subpart" rule that Python's errors="replace" decoding also follows.
#pragma once

#include <cstddef>
#include <string_view>

namespace kestrel {

struct Utf8Sequence {
  enum Kind {
    kValid,      // one well-formed character of `length` bytes
    kInvalid,    // `length` bytes (a maximal subpart) that one U+FFFD replaces
    kTruncated,  // the bytes run out inside a sequence that could still become valid
  };
  Kind kind = kValid;
  size_t length = 0;
};

// `s` must not be empty.
inline Utf8Sequence utf8_sequence(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Utf8Sequence::kValid, 1};
  size_t need = 0;                     // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Sequence::kInvalid, 1};
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i >= s.size()) return {Utf8Sequence::kTruncated, s.size()};
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {Utf8Sequence::kInvalid, i};
  }
  return {Utf8Sequence::kValid, need + 1};
}

}  // namespace kestrel
