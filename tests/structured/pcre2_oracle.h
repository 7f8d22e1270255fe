// PCRE2 as the reference for regex tests: full matches, and whether a string is a viable
// prefix of a match (hard partial matching), with the outer ^ and $ meaning what they mean for
// compile_regex (PCRE2_DOLLAR_ENDONLY: no match before a final newline).
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <string>

namespace kestrel::structured::test {

class Pcre2 {
 public:
  explicit Pcre2(const std::string& pattern) {
    full_ = compile(pattern, PCRE2_ENDANCHORED);
    partial_ = compile("(?:" + pattern + ")\\z", 0);
    data_ = pcre2_match_data_create(32, nullptr);
  }
  ~Pcre2() {
    pcre2_code_free(full_);
    pcre2_code_free(partial_);
    pcre2_match_data_free(data_);
  }
  Pcre2(const Pcre2&) = delete;
  Pcre2& operator=(const Pcre2&) = delete;

  bool ok() const { return full_ != nullptr && partial_ != nullptr; }

  bool full_match(const std::string& s) const {
    return pcre2_match(full_, subject(s), s.size(), 0, 0, data_, nullptr) >= 0;
  }

  enum class Prefix { kViable, kDead, kTruncated };
  // Whether some string starts with s (s non-empty: PCRE2 reports no partial match for "").
  Prefix prefix(const std::string& s) const {
    const int rc =
        pcre2_match(partial_, subject(s), s.size(), 0, PCRE2_PARTIAL_HARD, data_, nullptr);
    if (rc >= 0 || rc == PCRE2_ERROR_PARTIAL) return Prefix::kViable;
    if (rc == PCRE2_ERROR_UTF8_ERR1 || rc == PCRE2_ERROR_UTF8_ERR2 || rc == PCRE2_ERROR_UTF8_ERR3) {
      return Prefix::kTruncated;
    }
    return Prefix::kDead;
  }

 private:
  static PCRE2_SPTR subject(const std::string& s) { return reinterpret_cast<PCRE2_SPTR>(s.data()); }

  static pcre2_code* compile(const std::string& pattern, uint32_t extra) {
    pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
    int err = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY | extra,
                                     &err, &offset, ctx);
    pcre2_compile_context_free(ctx);
    return code;
  }

  pcre2_code* full_ = nullptr;
  pcre2_code* partial_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

}  // namespace kestrel::structured::test
