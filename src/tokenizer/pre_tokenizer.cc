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

void RegexSplitter::CodeDeleter::operator()(pcre2_code* code) const {
  pcre2_code_free(code);
}

Expected<RegexSplitter> RegexSplitter::create(std::span<const std::string> patterns) {
  RegexSplitter splitter;
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    Code code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr));
    if (!code) {
      return make_error("bad pre-tokenizer regex at offset {}: {} in {}", offset,
                        pcre2_message(error), pattern);
    }
    // JIT is only an accelerator: without it matching falls back to the interpreter.
    pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
    splitter.codes_.push_back(std::move(code));
  }
  return splitter;
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = valid_utf8_prefix(text.substr(i));
    if (valid > 0) {
      split_valid(text.substr(i, valid), out);
      i += valid;
    } else {
      out.push_back(text.substr(i, 1));
      ++i;
    }
  }
}

void RegexSplitter::split_valid(std::string_view text, std::vector<std::string_view>& out) const {
  const size_t first = out.size();
  out.push_back(text);
  std::vector<std::string_view> pieces;
  for (const Code& code : codes_) {
    MatchData match(pcre2_match_data_create_from_pattern(code.get(), nullptr));
    pieces.clear();
    for (size_t p = first; p < out.size(); ++p) {
      const std::string_view piece = out[p];
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;     // end of what has been emitted
      size_t search = 0;  // where the next match may start
      while (search < piece.size()) {
        // The text was validated above, so PCRE2 need not re-check it on every call.
        const int rc = pcre2_match(code.get(), subject, piece.size(), search, PCRE2_NO_UTF_CHECK,
                                   match.get(), nullptr);
        if (rc < 0) break;  // no further match (or a resource limit): the rest is one piece
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (end == begin) {  // an empty match splits nothing; look again one character on
          search = begin + 1;
          while (search < piece.size() &&
                 is_continuation(static_cast<unsigned char>(piece[search]))) {
            ++search;
          }
          continue;
        }
        if (begin > pos) pieces.push_back(piece.substr(pos, begin - pos));
        pieces.push_back(piece.substr(begin, end - begin));
        pos = search = end;
      }
      if (pos < piece.size()) pieces.push_back(piece.substr(pos));
    }
    out.resize(first);
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
}

}  // namespace kestrel
