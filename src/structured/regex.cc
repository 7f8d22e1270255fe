// Regex → Grammar: a recursive-descent parser over the pattern's bytes that builds generic
// nodes directly (grammar_builder.h), which also checks the result.
#include "structured/regex.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "structured/char_class.h"
#include "structured/grammar_builder.h"

namespace kestrel::structured {
namespace {

const CodeRanges& digit_ranges() {
  static const CodeRanges r = {{'0', '9'}};
  return r;
}
const CodeRanges& word_ranges() {
  static const CodeRanges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const CodeRanges& space_ranges() {
  static const CodeRanges r = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space
  return r;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_octal(char c) {
  return c >= '0' && c <= '7';
}
bool is_ascii_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A quantifier's bounds; nullopt where there is none.
using Bounds = std::optional<std::pair<int32_t, int32_t>>;

// One parsed escape or character: a code point, or a set (\d and friends).
struct Item {
  std::optional<uint32_t> cp;
  CodeRanges set;
};

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  Expected<std::shared_ptr<const Grammar>> run() {
    KASSIGN(const int32_t root, alternation());
    if (pos_ < p_.size()) return error("unbalanced parenthesis ')'");
    auto g = b_.finish(root);
    if (!g.ok()) return make_error("regex: {}", g.error().message);
    return g;
  }

 private:
  Error error(std::string_view what) const {
    return make_error("regex: {} at offset {}", what, pos_);
  }
  bool at(char c) const { return pos_ < p_.size() && p_[pos_] == c; }
  bool starts(std::string_view s) const { return p_.substr(pos_, s.size()) == s; }

  Expected<int32_t> alternation() {
    std::vector<int32_t> alts;
    while (true) {
      KASSIGN(const int32_t seq, sequence());
      alts.push_back(seq);
      if (!at('|')) break;
      ++pos_;
    }
    return b_.alternatives(std::move(alts));
  }

  Expected<int32_t> sequence() {
    std::vector<int32_t> items;
    while (pos_ < p_.size() && !at('|') && !at(')')) {
      KASSIGN(const std::optional<Item> single, single_char_atom());
      std::optional<int32_t> node;
      if (single) {
        node = single->cp ? b_.literal(utf8(*single->cp)) : b_.char_class(single->set);
      } else {
        KASSIGN(node, atom());
      }
      if (!node) continue;  // a comment or an outer anchor: nothing to match
      KASSIGN(const int32_t piece, quantified(*node, single ? single->cp : std::nullopt));
      items.push_back(piece);
    }
    return b_.sequence(std::move(items));
  }

  static std::string utf8(uint32_t cp) {
    std::string s;
    append_utf8(cp, s);
    return s;
  }

  // {n}, {n,}, {,m}, {n,m} or {,} at pos_; nullopt (pos_ unchanged) when it is not one.
  Expected<Bounds> braces() {
    size_t q = pos_ + 1;
    auto number = [&](int64_t& v) {
      const size_t start = q;
      v = 0;
      while (q < p_.size() && is_digit(p_[q])) {
        if (v <= kMaxRegexRepeat) v = v * 10 + (p_[q] - '0');
        ++q;
      }
      return q > start;
    };
    int64_t lo = 0, hi = 0;
    const bool has_lo = number(lo);
    bool has_hi = false;
    bool comma = false;
    if (q < p_.size() && p_[q] == ',') {
      comma = true;
      ++q;
      has_hi = number(hi);
    }
    if (q >= p_.size() || p_[q] != '}' || (!has_lo && !comma)) {
      return Bounds();
    }
    if (!comma) hi = lo;
    if (lo > kMaxRegexRepeat || (has_hi && hi > kMaxRegexRepeat)) {
      return error(fmt::format("a repetition bound above the limit of {}", kMaxRegexRepeat));
    }
    if (comma && !has_hi) hi = kUnbounded;
    if (lo > hi) return error("min repeat greater than max repeat");
    pos_ = q + 1;
    return Bounds(std::make_pair(static_cast<int32_t>(lo), static_cast<int32_t>(hi)));
  }

  Expected<Bounds> quantifier() {
    if (pos_ >= p_.size()) return Bounds();
    const char c = p_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      return Bounds(std::make_pair(c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded));
    }
    if (c == '{') return braces();
    return Bounds();
  }

  // A single character repeated becomes a class: no frame per round for ASCII.
  Expected<int32_t> quantified(int32_t node, std::optional<uint32_t> cp) {
    KASSIGN(const auto q, quantifier());
    if (!q) return node;
    if (at('?')) ++pos_;  // lazy: the same strings
    if (at('+')) return error("possessive quantifiers are not supported");
    KASSIGN(const auto again, quantifier());
    if (again) return error("multiple repeat (a quantifier after a quantifier)");
    if (cp) node = b_.char_class({{*cp, *cp}});
    return b_.repeat(node, q->first, q->second);
  }

  // A character, an escape or a class: what may stand for one character. nullopt otherwise
  // (pos_ unchanged).
  Expected<std::optional<Item>> single_char_atom() {
    const char c = p_[pos_];
    if (c == '[') {
      KASSIGN(CodeRanges set, char_class());
      return std::optional(Item{std::nullopt, std::move(set)});
    }
    if (c == '.') {
      ++pos_;
      return std::optional(Item{std::nullopt, complement_ranges({{'\n', '\n'}})});
    }
    if (c == '\\') {
      KASSIGN(Item item, escape(false));
      return std::optional(std::move(item));
    }
    if (c == '(' || c == '^' || c == '$' || c == '*' || c == '+' || c == '?') {
      return std::optional<Item>();
    }
    if (c == '{') {
      KASSIGN(const auto q, braces());
      if (q) return error("nothing to repeat");
    }
    KASSIGN(const uint32_t cp, character());
    return std::optional(Item{cp, {}});
  }

  Expected<uint32_t> character() {
    if (p_[pos_] == '\0') return error("a NUL character in the pattern (write \\0)");
    uint32_t cp = 0;
    if (!decode_utf8(p_, pos_, cp)) return error("the pattern is not valid UTF-8");
    return cp;
  }

  // Groups and anchors; nullopt for what matches nothing.
  Expected<std::optional<int32_t>> atom() {
    const char c = p_[pos_];
    if (c == '^') {
      if (pos_ != 0) return error("the anchor '^' is only supported at the start of the pattern");
      ++pos_;
      return std::optional<int32_t>();
    }
    if (c == '$') {
      if (pos_ + 1 != p_.size() || depth_ != 0) {
        return error("the anchor '$' is only supported at the end of the pattern");
      }
      ++pos_;
      return std::optional<int32_t>();
    }
    if (c != '(') return error("nothing to repeat");
    if (depth_ == kMaxGroupNesting) {
      return error(fmt::format("groups nested more than {} deep", kMaxGroupNesting));
    }
    const size_t open = pos_;
    ++pos_;
    if (at('?')) {
      KASSIGN(const bool comment, group_extension());
      if (comment) return std::optional<int32_t>();
    }
    ++depth_;
    KASSIGN(const int32_t body, alternation());
    --depth_;
    if (!at(')')) {
      return make_error("regex: missing ')' for the group opened at offset {}", open);
    }
    ++pos_;
    return std::optional(body);
  }

  // After "(?": accepts (?: (?P<name> (?<name> and skips (?#...) (returning true); refuses the
  // rest by name.
  Expected<bool> group_extension() {
    ++pos_;
    if (at(':')) {
      ++pos_;
      return false;
    }
    if (at('#')) {
      while (pos_ < p_.size() && p_[pos_] != ')') ++pos_;
      if (!at(')')) return error("missing ')' after a (?# comment");
      ++pos_;
      return true;
    }
    if (starts("P=")) return error("backreferences ((?P=name)) are not supported");
    if (starts("=") || starts("!")) return error("lookahead assertions are not supported");
    if (starts("<=") || starts("<!")) return error("lookbehind assertions are not supported");
    if (starts("P<") || starts("<")) {
      pos_ += at('P') ? 2 : 1;
      const size_t start = pos_;
      while (pos_ < p_.size() && (is_ascii_alnum(p_[pos_]) || p_[pos_] == '_')) ++pos_;
      if (pos_ == start || is_digit(p_[start]) || !at('>')) return error("bad group name");
      ++pos_;
      return false;
    }
    if (at('>')) return error("atomic groups are not supported");
    if (at('(')) return error("conditional groups are not supported");
    if (at('|')) return error("branch reset groups are not supported");
    if (pos_ < p_.size() && std::string_view("aiLmsux-").find(p_[pos_]) != std::string_view::npos) {
      return error("inline flags such as (?i) are not supported");
    }
    return error("unknown group extension '(?'");
  }

  // After a backslash (in a class when in_class).
  Expected<Item> escape(bool in_class) {
    ++pos_;
    if (pos_ >= p_.size()) return error("a trailing backslash");
    const char c = p_[pos_];
    const size_t at_letter = pos_++;
    auto code = [](uint32_t cp) { return Item{cp, {}}; };
    switch (c) {
      case 'd':
        return Item{std::nullopt, digit_ranges()};
      case 'D':
        return Item{std::nullopt, complement_ranges(digit_ranges())};
      case 'w':
        return Item{std::nullopt, word_ranges()};
      case 'W':
        return Item{std::nullopt, complement_ranges(word_ranges())};
      case 's':
        return Item{std::nullopt, space_ranges()};
      case 'S':
        return Item{std::nullopt, complement_ranges(space_ranges())};
      case 'n':
        return code('\n');
      case 't':
        return code('\t');
      case 'r':
        return code('\r');
      case 'f':
        return code('\f');
      case 'v':
        return code('\v');
      case 'a':
        return code('\a');
      case 'b':
        if (in_class) return code('\b');
        return error("word boundaries (\\b) are not supported");
      case 'B':
        return error("word boundaries (\\B) are not supported");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return error(fmt::format(
            "the anchor \\{} is not supported (only a leading ^ and a trailing $ are)", c));
      case 'p':
      case 'P':
        return error("Unicode property classes (\\p{...}) are not supported");
      case 'N':
        return error("named characters (\\N{...}) are not supported");
      case 'k':
      case 'g':
        return error(fmt::format("backreferences (\\{}) are not supported", c));
      case 'x':
      case 'u':
      case 'U':
        return hex_escape(c);
      default:
        break;
    }
    if (is_digit(c)) {
      // Python: \0, or three octal digits, is a character; anything else is a backreference.
      size_t q = at_letter;
      uint32_t v = 0;
      size_t n = 0;
      for (; n < 3 && q < p_.size() && is_octal(p_[q]); ++n) v = v * 8 + (p_[q++] - '0');
      if (c == '0' || (n == 3 && v <= 0377)) {
        pos_ = q;
        return code(v);
      }
      return error(fmt::format("backreferences (\\{}) are not supported", c));
    }
    if (is_ascii_alnum(c)) return error(fmt::format("unsupported escape \\{}", c));
    pos_ = at_letter;
    KASSIGN(const uint32_t cp, character());
    return code(cp);
  }

  Expected<Item> hex_escape(char kind) {
    uint32_t cp = 0;
    bool ok = false;
    if (kind == 'x') {
      ok = read_hex(p_, pos_, 2, 2, cp);
    } else if (kind == 'U') {
      ok = read_hex(p_, pos_, 8, 8, cp);
    } else if (at('{')) {
      ++pos_;
      ok = read_hex(p_, pos_, 1, 6, cp) && at('}');
      if (ok) ++pos_;
    } else {
      ok = read_hex(p_, pos_, 4, 4, cp);
    }
    if (!ok) return error(fmt::format("a bad \\{} escape", kind));
    if (cp >= 0xD800 && cp <= 0xDFFF) return error("a surrogate code point is not a character");
    return Item{cp, {}};
  }

  Expected<CodeRanges> char_class() {
    const size_t open = pos_;
    ++pos_;
    const bool negate = at('^');
    if (negate) ++pos_;
    if (starts("[:") || starts("[=") || starts("[.")) {
      return error("POSIX classes such as [[:alpha:]] are not supported");
    }
    CodeRanges set;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) {
        return make_error("regex: unterminated character class opened at offset {}", open);
      }
      if (at(']') && !first) break;
      first = false;
      KASSIGN(const Item lo, class_item());
      const bool range = at('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']';
      if (!lo.cp) {
        if (range) return error("a bad character range");
        set.insert(set.end(), lo.set.begin(), lo.set.end());
        continue;
      }
      if (range) {
        ++pos_;
        KASSIGN(const Item hi, class_item());
        if (!hi.cp || *hi.cp < *lo.cp) return error("a bad character range");
        set.emplace_back(*lo.cp, *hi.cp);
      } else {
        set.emplace_back(*lo.cp, *lo.cp);
      }
    }
    ++pos_;
    set = negate ? complement_ranges(set) : normalize_ranges(std::move(set));
    if (set.empty()) {
      return make_error("regex: the character class at offset {} matches no character", open);
    }
    return set;
  }

  Expected<Item> class_item() {
    if (at('\\')) return escape(true);
    KASSIGN(const uint32_t cp, character());
    return Item{cp, {}};
  }

  std::string_view p_;
  size_t pos_ = 0;
  int depth_ = 0;
  GrammarBuilder b_;
};

}  // namespace

Expected<std::shared_ptr<const Grammar>> compile_regex(std::string_view pattern) {
  return RegexParser(pattern).run();
}

}  // namespace kestrel::structured
