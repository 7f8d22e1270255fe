// chat/jinja_lexer.cc — jinja2's lexer rules, written as a hand scanner.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "chat/jinja_value.h"
#include "chat/py_str.h"

namespace kestrel::chat {

namespace {

// jinja2 splits the source on \r\n, \r and \n, rejoins with \n and drops one final newline
// (keep_trailing_newline=False).
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Python's str.rstrip() (Unicode whitespace).
std::string rstrip_ws(std::string_view s) {
  return py_strip(s, std::nullopt, false, true);
}

bool all_ws(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t cp : utf8_decode(s))
    if (!py_isspace(cp)) return false;
  return true;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = pos;
      char kind = 0;
      while ((start = src_.find('{', start)) != std::string::npos) {
        const char c = start + 1 < src_.size() ? src_[start + 1] : '\0';
        if (c == '{' || c == '%' || c == '#') {
          kind = c;
          break;
        }
        ++start;
      }
      if (kind == 0) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, start - pos);
      const char sign =
          start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
              ? src_[start + 2]
              : 0;
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_ws(std::string_view(text).substr(l_pos)))
          text.resize(l_pos);
      }
      emit_text(text, pos);
      size_t p = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, p);
      } else if (kind == '%' && is_raw(p)) {
        pos = lex_raw(start, p);
      } else {
        pos = lex_tag(kind, start, p);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof;
    eof.kind = Token::Kind::kEof;
    locate(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg, size_t offset) {
    Token t;
    locate(t, offset);
    throw JinjaError{"TemplateSyntaxError: " + msg, t.line, t.column};
  }

  void locate(Token& t, size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    t.line = static_cast<int>(line);
    t.column = static_cast<int>(offset - line_starts_[line - 1] + 1);
  }

  void emit_text(const std::string& text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = Token::Kind::kText;
    t.text = text;
    locate(t, offset);
    tokens_.push_back(std::move(t));
  }

  void push(Token::Kind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    locate(t, offset);
    tokens_.push_back(std::move(t));
  }

  size_t skip_ws(size_t p) const {
    while (p < src_.size() && is_ws(src_[p])) ++p;
    return p;
  }

  // After a block or comment end: `-` eats all following whitespace, otherwise trim_blocks
  // eats one newline unless `+` asked to keep it.
  size_t after_end(size_t p, char marker, bool trim_newline) const {
    if (marker == '-') {
      while (p < src_.size()) {
        const auto c = static_cast<unsigned char>(src_[p]);
        const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        const std::u32string cp = utf8_decode(std::string_view(src_).substr(p, len));
        if (cp.size() != 1 || !py_isspace(cp[0])) break;
        p += len;
      }
      return p;
    }
    if (marker != '+' && trim_newline && p < src_.size() && src_[p] == '\n') return p + 1;
    return p;
  }

  size_t lex_comment(size_t start, size_t p) {
    const size_t end = src_.find("#}", p);
    if (end == std::string::npos) fail("missing end of comment tag", start);
    const char marker =
        end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    return after_end(end + 2, marker, true);
  }

  // `{% raw %}` with optional markers; p is just past `{%` and its marker.
  bool is_raw(size_t p) const {
    p = skip_ws(p);
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3])))
      return false;
    p = skip_ws(p + 3);
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  size_t lex_raw(size_t start, size_t p) {
    p = skip_ws(skip_ws(p) + 3);  // is_raw() checked the `raw` keyword
    char marker = 0;
    if (src_[p] == '-' || src_[p] == '+') marker = src_[p++];
    p = after_end(p + 2, marker, true);
    size_t search = p;
    while (true) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail("missing end of raw directive", start);
      size_t q = tag + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
      q = skip_ws(q);
      if (src_.compare(q, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      q = skip_ws(q + 6);
      char end_marker = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_marker = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = tag + 2;
        continue;
      }
      std::string body = src_.substr(p, tag - p);
      if (sign == '-') body = rstrip_ws(body);
      emit_text(body, p);
      return after_end(q + 2, end_marker, true);
    }
  }

  size_t lex_tag(char kind, size_t start, size_t p) {
    push(kind == '{' ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "", start);
    int depth = 0;
    while (true) {
      p = skip_ws(p);
      if (p >= src_.size())
        fail(kind == '{' ? "unexpected end of template, expected '}}'"
                         : "unexpected end of template, expected '%}'",
             start);
      if (depth == 0) {
        const char close = kind == '{' ? '}' : '%';
        char marker = 0;
        size_t q = p;
        if ((src_[q] == '-' || (src_[q] == '+' && kind == '%')) && q + 1 < src_.size() &&
            src_[q + 1] == close && q + 2 < src_.size() && src_[q + 2] == '}') {
          marker = src_[q++];
        }
        if (src_[q] == close && q + 1 < src_.size() && src_[q + 1] == '}') {
          push(kind == '{' ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "", p);
          return after_end(q + 2, marker, kind == '%');
        }
      }
      p = lex_expr_token(p, depth);
    }
  }

  size_t lex_expr_token(size_t p, int& depth) {
    const char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      push(Token::Kind::kName, src_.substr(p, e - p), p);
      return e;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                       "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                       "<",  ">",  "=",  ".",  ":",  "|",  ",", ";"};
    for (const char* op : kOps) {
      const size_t len = std::strlen(op);
      if (src_.compare(p, len, op) == 0) {
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if (*op == ')' || *op == ']' || *op == '}') {
          if (depth == 0) fail(fmt::format("unexpected '{}'", op), p);
          --depth;
        }
        push(Token::Kind::kOp, op, p);
        return p + len;
      }
    }
    fail(fmt::format("unexpected char '{}'", c), p);
  }

  size_t lex_digits(size_t p) const {
    while (p < src_.size() &&
           (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
      ++p;
    return p;
  }

  size_t lex_number(size_t p) {
    size_t e = lex_digits(p);
    bool is_float = false;
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot) {
      if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
        e = lex_digits(e + 1);
        is_float = true;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t q = e + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && is_digit(src_[q])) {
          e = lex_digits(q);
          is_float = true;
        }
      }
    }
    int base = 10;
    size_t first = p;  // first digit after any 0x/0o/0b prefix
    if (!is_float && src_[p] == '0') {
      // Python integer syntax: 0x1f, 0o17, 0b101, or zeros only (08 is two tokens).
      const char x = p + 1 < src_.size() ? static_cast<char>(src_[p + 1] | 0x20) : '\0';
      base = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 10;
      e = p + 1;
      if (base != 10) {
        first = e = p + 2;
        auto ok = [&](char c) { return c != '_' && hex_value(c) >= 0 && hex_value(c) < base; };
        while (e < src_.size() &&
               (ok(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && ok(src_[e + 1]))))
          ++e;
        if (e == first) fail("invalid integer literal", p);
      } else {
        while (e < src_.size() &&
               (src_[e] == '0' || (src_[e] == '_' && e + 1 < src_.size() && src_[e + 1] == '0')))
          ++e;
      }
    }
    std::string digits;
    for (size_t k = first; k < e; ++k)
      if (src_[k] != '_') digits.push_back(src_[k]);
    Token t;
    locate(t, p);
    t.text = digits;
    if (is_float) {
      t.kind = Token::Kind::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = Token::Kind::kInt;
      errno = 0;
      t.int_value = std::strtoll(digits.c_str(), nullptr, base);
      if (errno == ERANGE) fail("integer literal too large", p);
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  // Python's unicode-escape decoding, which jinja2 applies to string literals.
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    std::string out;
    size_t k = p + 1;
    while (true) {
      if (k >= src_.size()) fail("unterminated string", p);
      const char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail("unterminated string", p);
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(e);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int d = 0; d < n; ++d) {
            const int h = k + d < src_.size() ? hex_value(src_[k + d]) : -1;
            if (h < 0) fail("truncated \\x/\\u escape in string", p);
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) fail("illegal Unicode character in string", p);
          append_utf8(out, cp);
          k += static_cast<size_t>(n);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int d = 0; d < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++d)
              cp = cp * 8 + static_cast<char32_t>(src_[k++] - '0');
            append_utf8(out, cp);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    push(Token::Kind::kString, std::move(out), p);
    return k + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace kestrel::chat
