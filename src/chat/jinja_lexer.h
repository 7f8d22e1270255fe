// chat/jinja_lexer.h — template source → tokens, applying jinja2's whitespace rules as
// transformers configures them: trim_blocks, lstrip_blocks, `-`/`+` markers, newline
// normalisation and the dropped final newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

struct Token {
  enum class Kind : uint8_t {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof,
  };
  Kind kind = Kind::kEof;
  std::string text;  // text data, name, decoded string literal, or operator
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

// Throws JinjaError on malformed input (unterminated tags or strings, bad characters).
std::vector<Token> tokenize(std::string_view source);

}  // namespace kestrel::chat
