// tokenizer/pre_tokenizer.cc — regex splitting with PCRE2 (JIT-compiled where available).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

namespace kestrel {
namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "unknown PCRE2 error" : std::string(reinterpret_cast<const char*>(buf), n);
}

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is not one.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = at(0);
  size_t n = 0;
  uint32_t min = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if (!is_continuation(at(k))) return 0;
    cp = (cp << 6) | (at(k) & 0x3F);
  }
  const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
  return cp < min || cp > 0x10FFFF || surrogate ? 0 : n;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

void Regex::CodeDeleter::operator()(pcre2_code* code) const {
  pcre2_code_free(code);
}

Expected<Regex> Regex::create(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
  if (!code) {
    return make_error("bad regex at offset {}: {} in {}", offset, pcre2_message(error), pattern);
  }
  // JIT is only an accelerator: without it matching falls back to the interpreter.
  pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  Regex regex;
  regex.code_ = std::move(code);
  return regex;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = valid_utf8_prefix(text.substr(i));
    if (valid > 0) {
      find_all_valid(text.substr(i, valid), i, out);
      i += valid;
    } else {
      ++i;
    }
  }
}

void Regex::find_all_valid(std::string_view text, size_t offset,
                           std::vector<std::pair<size_t, size_t>>& out) const {
  // Only the whole-match range is read, so one pair of offsets suffices for every pattern; the
  // block is reused per thread to keep allocation out of the per-piece loop.
  thread_local MatchData match(pcre2_match_data_create(1, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search = 0;  // where the next match may start
  while (search < text.size()) {
    // The text was validated by the caller, so PCRE2 need not re-check it on every call.
    const int rc = pcre2_match(code_.get(), subject, text.size(), search, PCRE2_NO_UTF_CHECK,
                               match.get(), nullptr);
    if (rc < 0) break;  // no further match (or a resource limit)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {  // an empty match splits nothing; look again one character on
      search = begin + 1;
      while (search < text.size() && is_continuation(static_cast<unsigned char>(text[search]))) {
        ++search;
      }
      continue;
    }
    out.emplace_back(offset + begin, offset + end);
    search = end;
  }
}

Expected<RegexSplitter> RegexSplitter::create(std::span<const std::string> patterns) {
  RegexSplitter splitter;
  for (const std::string& pattern : patterns) {
    KASSIGN(Regex regex, Regex::create(pattern));
    splitter.regexes_.push_back(std::move(regex));
  }
  return splitter;
}

// Invalid bytes never match, so they end up in the text between matches; they are then made
// pieces of their own.
void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> pieces = {text};
  std::vector<std::string_view> next;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Regex& regex : regexes_) {
    next.clear();
    for (std::string_view piece : pieces) {
      matches.clear();
      regex.find_all(piece, matches);
      size_t pos = 0;
      for (const auto& [begin, end] : matches) {
        if (begin > pos) next.push_back(piece.substr(pos, begin - pos));
        next.push_back(piece.substr(begin, end - begin));
        pos = end;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) {
    size_t i = 0;
    while (i < piece.size()) {
      const size_t valid = valid_utf8_prefix(piece.substr(i));
      if (valid > 0) {
        out.push_back(piece.substr(i, valid));
        i += valid;
      } else {
        out.push_back(piece.substr(i, 1));
        ++i;
      }
    }
  }
}

}  // namespace kestrel
