// tokenizer/unicode.h — the small Unicode toolkit the Hugging Face tokenizer pipeline needs:
// UTF-8 stepping that tolerates invalid bytes, White_Space, the four normalization forms and
// lowercasing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kestrel {

struct Utf8Char {
  char32_t cp;  // the code point, or the byte itself when `valid` is false
  size_t length;
  bool valid;
};

// The character at text[pos] (pos < text.size()); an invalid byte is a one-byte character.
Utf8Char next_utf8_char(std::string_view text, size_t pos);
void append_utf8(std::string& out, char32_t cp);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool is_white_space(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Normalizes valid UTF-8; invalid bytes are copied through and break composition.
std::string normalize(std::string_view text, NormalForm form);

// Lowercases character by character (full mappings, no context rules such as final sigma), as
// the HF Lowercase normalizer does.
std::string to_lowercase(std::string_view text);

}  // namespace kestrel
