// EBNF → Grammar: a recursive-descent parser that builds generic nodes directly; rules become
// named slots (grammar_builder.h), so forward references and recursion need no second pass.
#include "structured/ebnf.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "structured/char_class.h"
#include "structured/grammar_builder.h"

namespace kestrel::structured {
namespace {

bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

struct RuleRef {
  int32_t slot = -1;
  size_t first_use = std::string_view::npos;
  bool defined = false;
};

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : t_(text) {}

  Expected<std::shared_ptr<const Grammar>> run() {
    skip_space();
    while (pos_ < t_.size()) KTRY(rule());
    // The undefined rule used first in the text.
    const std::pair<const std::string, RuleRef>* undefined = nullptr;
    for (const auto& entry : rules_) {
      if (!entry.second.defined &&
          (undefined == nullptr || entry.second.first_use < undefined->second.first_use)) {
        undefined = &entry;
      }
    }
    if (undefined != nullptr) {
      pos_ = undefined->second.first_use;
      return error(fmt::format("rule '{}' is not defined", undefined->first));
    }
    auto root = rules_.find("root");
    if (root == rules_.end()) {
      return make_error("EBNF: the grammar has no rule 'root' (the start rule: root ::= ...)");
    }
    auto g = b_.finish(root->second.slot);
    if (!g.ok()) return make_error("EBNF: {}", g.error().message);
    return g;
  }

 private:
  std::string where(size_t pos) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return fmt::format("line {}, column {}", line, col);
  }
  Error error(std::string_view what) const { return make_error("EBNF {}: {}", where(pos_), what); }
  bool at(char c) const { return pos_ < t_.size() && t_[pos_] == c; }
  // What stands at pos_, for messages.
  std::string found() const {
    if (pos_ >= t_.size()) return "the end of the grammar";
    if (t_[pos_] == '\n') return "the end of the line";
    // Quoted by hand: Debian's libspdlog exports its own instance of fmt's vformat_to, which the
    // dynamic linker may bind in place of libfmt's, and that one rejects the {:?} specifier.
    const unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c < 0x20 || c >= 0x7f) return fmt::format("'\\x{:02x}'", c);
    if (c == '\'' || c == '\\') return fmt::format("'\\{}'", char(c));
    return fmt::format("'{}'", char(c));
  }

  void skip_space() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  size_t name_end(size_t from) const {
    if (from >= t_.size() || !name_start(t_[from])) return from;
    while (from < t_.size() && name_char(t_[from])) ++from;
    return from;
  }

  // A rule definition begins here: a name (with options, which are refused later) and "::=".
  bool rule_starts() {
    const size_t saved = pos_;
    size_t end = name_end(pos_);
    if (end == pos_) return false;
    if (end < t_.size() && t_[end] == '[') {
      while (end < t_.size() && t_[end] != ']' && t_[end] != '\n') ++end;
      if (end < t_.size() && t_[end] == ']') ++end;
    }
    pos_ = end;
    skip_space();
    const bool starts = t_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return starts;
  }

  RuleRef& ref(const std::string& name) {
    RuleRef& r = rules_[name];
    if (r.slot < 0) r.slot = b_.rule(name);
    return r;
  }

  Status rule() {
    const size_t start = pos_;
    const size_t end = name_end(pos_);
    if (end == pos_) return error(fmt::format("expected a rule name, found {}", found()));
    for (size_t i = start; i > 0 && t_[i - 1] != '\n'; --i) {
      if (t_[i - 1] != ' ' && t_[i - 1] != '\t' && t_[i - 1] != '\r') {
        return error("a rule definition must start on its own line");
      }
    }
    const std::string name(t_.substr(start, end - start));
    pos_ = end;
    if (at('[')) return error("rule options such as name[temperature=...] are not supported");
    skip_space();
    if (t_.substr(pos_, 3) != "::=") {
      return error(fmt::format("expected '::=' after the rule name '{}', found {}", name, found()));
    }
    RuleRef& r = ref(name);
    if (r.defined) {
      pos_ = start;
      return error(fmt::format("rule '{}' is defined twice", name));
    }
    r.defined = true;
    const int32_t slot = r.slot;
    pos_ += 3;
    KASSIGN(const int32_t body, alternation());
    b_.define(slot, body);
    return Status::Ok();
  }

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
    while (true) {
      skip_space();
      if (pos_ >= t_.size() || at('|') || at(')') || rule_starts()) break;
      KASSIGN(int32_t item, element());
      KASSIGN(item, repetition(item));
      items.push_back(item);
    }
    return b_.sequence(std::move(items));
  }

  Expected<int32_t> element() {
    if (at('"')) return string_literal();
    if (at('[')) return char_class();
    if (at('(')) {
      if (depth_ == kMaxGroupNesting) {
        return error(fmt::format("groups nested more than {} deep", kMaxGroupNesting));
      }
      const size_t open = pos_++;
      ++depth_;
      KASSIGN(const int32_t body, alternation());
      --depth_;
      skip_space();
      if (!at(')')) {
        return error(fmt::format("expected ')' to close the group opened at {}, found {}",
                                 where(open), found()));
      }
      ++pos_;
      return body;
    }
    const size_t end = name_end(pos_);
    if (end == pos_) {
      return error(fmt::format(
          "expected an element (a \"string\", a [class], a rule name or a group), found {}",
          found()));
    }
    const std::string name(t_.substr(pos_, end - pos_));
    if (end < t_.size() && t_[end] == '(' && !rules_.count(name)) {
      for (const char* macro : {"TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken"}) {
        if (name == macro) return error(fmt::format("xgrammar's {}(...) is not supported", name));
      }
    }
    RuleRef& r = ref(name);
    if (r.first_use == std::string_view::npos) r.first_use = pos_;
    pos_ = end;
    return r.slot;
  }

  Expected<int32_t> count() {
    skip_space();
    if (at(',')) return error("a repetition needs its lower bound: write {0,m}");
    if (pos_ >= t_.size() || !is_digit(t_[pos_])) return -1;
    int64_t v = 0;
    while (pos_ < t_.size() && is_digit(t_[pos_])) {
      if (v <= kMaxEbnfRepeat) v = v * 10 + (t_[pos_] - '0');
      ++pos_;
    }
    if (v > kMaxEbnfRepeat) {
      return error(fmt::format("a repetition bound above the limit of {}", kMaxEbnfRepeat));
    }
    skip_space();
    return static_cast<int32_t>(v);
  }

  Expected<int32_t> repetition(int32_t item) {
    skip_space();
    int32_t lo = 0, hi = 0;
    if (at('*') || at('+') || at('?')) {
      lo = at('+') ? 1 : 0;
      hi = at('?') ? 1 : kUnbounded;
      ++pos_;
    } else if (at('{')) {
      ++pos_;
      KASSIGN(lo, count());
      if (lo < 0) return error(fmt::format("expected a repetition count, found {}", found()));
      hi = lo;
      if (at(',')) {
        ++pos_;
        skip_space();
        hi = kUnbounded;
        if (pos_ < t_.size() && is_digit(t_[pos_])) {
          KASSIGN(hi, count());
        }
      }
      if (!at('}')) {
        return error(fmt::format("expected '}}' to end the repetition, found {}", found()));
      }
      ++pos_;
      if (lo > hi) return error("the repetition's lower bound is above its upper bound");
    } else {
      return item;
    }
    skip_space();
    if (at('*') || at('+') || at('?') || at('{')) {
      return error("two repetition operators on one element: group it first, e.g. (x+)*");
    }
    return b_.repeat(item, lo, hi);
  }

  // One escape after the backslash at pos_; in_class allows the class punctuation escapes.
  Expected<uint32_t> escape(bool in_class) {
    ++pos_;
    if (pos_ >= t_.size()) return error("a backslash at the end of the grammar");
    const char c = t_[pos_++];
    switch (c) {
      case '"':
      case '\\':
      case '/':
      case '\'':
      case '?':
        return static_cast<uint32_t>(c);
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case 'b':
        return uint32_t{'\b'};
      case 'f':
        return uint32_t{'\f'};
      case 'a':
        return uint32_t{'\a'};
      case 'v':
        return uint32_t{'\v'};
      case '0':
        return uint32_t{0};
      case 'e':
        return uint32_t{0x1B};
      case 'x':
      case 'u':
      case 'U': {
        uint32_t cp = 0;
        const size_t digits = c == 'x' ? 1 : c == 'u' ? 4 : 8;
        if (!read_hex(t_, pos_, digits, c == 'x' ? 8 : digits, cp)) {
          return error(fmt::format("a bad \\{} escape", c));
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) return error("a surrogate code point is not a character");
        return cp;
      }
      default:
        break;
    }
    if (in_class && std::string_view("^$.*+()[]{}|-").find(c) != std::string_view::npos) {
      return static_cast<uint32_t>(c);
    }
    if (in_class && std::string_view("dwsDWS").find(c) != std::string_view::npos) {
      return error(fmt::format(
          "\\{} is not supported in a character class: write the ranges, e.g. [0-9]", c));
    }
    --pos_;
    return error(fmt::format("unknown escape \\{}", c));
  }

  // A raw character of a literal or class.
  Expected<uint32_t> character(const char* where) {
    if (t_[pos_] == '\n') {
      return error(fmt::format("a raw newline inside {} (write \\n)", where));
    }
    uint32_t cp = 0;
    if (!decode_utf8(t_, pos_, cp)) return error("the grammar is not valid UTF-8");
    return cp;
  }

  Expected<int32_t> string_literal() {
    const size_t open = pos_++;
    std::string bytes;
    while (!at('"')) {
      if (pos_ >= t_.size()) {
        pos_ = open;
        return error("this string literal is not closed");
      }
      uint32_t cp = 0;
      if (at('\\')) {
        KASSIGN(cp, escape(false));
      } else {
        KASSIGN(cp, character("a string literal"));
      }
      append_utf8(cp, bytes);
    }
    ++pos_;
    return b_.literal(std::move(bytes));
  }

  Expected<int32_t> char_class() {
    const size_t open = pos_++;
    const bool negate = at('^');
    if (negate) ++pos_;
    CodeRanges set;
    auto one = [&]() -> Expected<uint32_t> {
      if (at('\\')) return escape(true);
      return character("a character class");
    };
    while (!at(']')) {
      if (pos_ >= t_.size()) {
        pos_ = open;
        return error("this character class is not closed");
      }
      KASSIGN(const uint32_t lo, one());
      uint32_t hi = lo;
      if (at('-') && pos_ + 1 < t_.size() && t_[pos_ + 1] != ']') {
        ++pos_;
        KASSIGN(hi, one());
        if (hi < lo) return error("a character range whose end is below its start");
      }
      set.emplace_back(lo, hi);
    }
    ++pos_;
    set = negate ? complement_ranges(set) : normalize_ranges(std::move(set));
    if (set.empty()) {
      pos_ = open;
      return error("this character class matches no character");
    }
    return b_.char_class(std::move(set));
  }

  std::string_view t_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open
  GrammarBuilder b_;
  std::map<std::string, RuleRef> rules_;
};

}  // namespace

Expected<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view text) {
  return EbnfParser(text).run();
}

bool looks_like_lark(std::string_view text) {
  if (text.empty()) return false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    const size_t comment = std::min(line.find('#'), line.find("//"));
    if (comment != std::string_view::npos) line = line.substr(0, comment);
    if (line.find("::=") != std::string_view::npos) return false;
    start = end + 1;
  }
  return true;
}

}  // namespace kestrel::structured
