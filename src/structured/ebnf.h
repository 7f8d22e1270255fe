// structured/ebnf.h — the `grammar` kind of structured outputs: an EBNF grammar in the GBNF /
// xgrammar form that vLLM hands to xgrammar, compiled to a generic Grammar. The whole output
// must match the rule `root`.
//
// Supported:
//   * rules `name ::= expression`; a rule starts on its own line and may span several lines
//     (the next rule begins where `name ::=` appears); names are [A-Za-z_][A-Za-z0-9_.-]*;
//     rules may be referenced before they are defined; `root` is the start rule
//   * string literals "..." with escapes \" \\ \/ \' \? \n \r \t \b \f \a \v \0 \e, \xH..
//     (one or more hex digits), \uHHHH, \UHHHHHHHH; "" is the empty string
//   * character classes [...] and [^...] with ranges and the same escapes, plus
//     \^ \$ \. \* \+ \? \( \) \[ \] \{ \} \| \/ \-; [^] is any character
//   * sequences, alternation |, grouping ( ) (an empty group is the empty string)
//   * repetition * + ? {n} {n,} {n,m} after an element (bounds up to kMaxEbnfRepeat)
//   * comments from # to the end of the line
// Refused, with the line and column: syntax errors (saying what was expected), undefined or
// twice-defined rules, a missing root, regex shorthands (\d \w \s) in classes, {,m}, two
// repetition operators on one element, rule options (name[...]) and xgrammar's macros
// (TagDispatch, Token, ...). Left recursion (a rule reaching itself without consuming text) and
// rules that can never finish are refused naming the rule: the matcher is top-down.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"
#include "structured/grammar.h"

namespace kestrel::structured {

inline constexpr int32_t kMaxEbnfRepeat = 10000;

Expected<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view text);

// vLLM's heuristic (grammar_is_likely_lark): a non-empty grammar none of whose lines, once
// `#` and `//` comments are cut, contains "::=" is taken for Lark, which is not supported.
bool looks_like_lark(std::string_view text);

}  // namespace kestrel::structured
