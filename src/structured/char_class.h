// structured/char_class.h — sets of Unicode code points and their UTF-8 byte automata
// (CharClass in grammar.h), shared by the regex and EBNF front ends.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace kestrel::structured {

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged ranges without surrogates or anything above U+10FFFF (empty: no character).
CodeRanges normalize_ranges(CodeRanges ranges);
// Every Unicode scalar value not in `ranges`.
CodeRanges complement_ranges(const CodeRanges& ranges);
// The byte automaton of the characters in `ranges` (normalized here).
CharClass compile_char_class(CodeRanges ranges);

// Appends the UTF-8 encoding of a scalar value.
void append_utf8(uint32_t cp, std::string& out);
// Decodes the well-formed UTF-8 character at text[pos], advancing pos; false when there is none.
bool decode_utf8(std::string_view text, size_t& pos, uint32_t& cp);
// Reads min_digits to max_digits hex digits at text[pos] (as many as there are), advancing pos;
// false when fewer than min_digits are there or the value exceeds U+10FFFF.
bool read_hex(std::string_view text, size_t& pos, size_t min_digits, size_t max_digits,
              uint32_t& value);

}  // namespace kestrel::structured
