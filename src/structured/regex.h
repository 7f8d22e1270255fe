// structured/regex.h — a regular expression (Python `re` syntax, as vLLM users write for the
// `regex` kind of structured outputs) compiled to a generic Grammar. The whole output must
// match, as with re.fullmatch: nothing may come before or after.
//
// Supported:
//   * literal characters, UTF-8 included; `.` (any character but \n)
//   * escapes \\ \. \n \t \r \f \v \a \0 (and octal \0oo, \ooo), \xHH, \uHHHH, \u{H..},
//     \UHHHHHHHH, and any escaped punctuation (\* \( \[ \{ \$ ...)
//   * classes [...] and [^...] with ranges and escapes ([\b] is backspace), \d \w \s and
//     \D \W \S inside or outside them — ASCII meanings only: \d = [0-9],
//     \w = [A-Za-z0-9_], \s = [ \t\n\r\f\v]
//   * groups ( ), (?: ), (?P<name> ), (?<name> ), comments (?# ), alternation |
//   * quantifiers * + ? {n} {n,} {,m} {n,m} and their lazy forms (*? +? ?? {..}?), which match
//     the same strings; a `{` that does not start a quantifier is a literal, as in Python
//   * a leading ^ and a trailing $ (they add nothing: the match is anchored anyway)
// Refused, with an error naming the construct: backreferences (\1, (?P=name), \k, \g),
// lookahead and lookbehind, word boundaries \b \B, any other anchor (^ or $ elsewhere, \A \Z
// \z \G), inline flags ((?i) and the like), atomic groups and possessive quantifiers,
// conditionals, \p{..} / \P{..}, \N{..}, POSIX classes [[:alpha:]], other unknown escapes,
// quantifier bounds above kMaxRegexRepeat, unbalanced parentheses, a class matching no
// character, a NUL character in the pattern, a pattern that is not valid UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"
#include "structured/grammar.h"

namespace kestrel::structured {

inline constexpr int32_t kMaxRegexRepeat = 10000;

Expected<std::shared_ptr<const Grammar>> compile_regex(std::string_view pattern);

}  // namespace kestrel::structured
