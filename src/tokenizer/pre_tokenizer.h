// tokenizer/pre_tokenizer.h — splitting text into the pieces BPE works on, by a sequence of
// regexes (PCRE2 with UTF and Unicode properties).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

struct pcre2_real_code_8;

namespace kestrel {

// The split regexes of the common byte-level vocabularies, as their tokenizer.json files give them.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Isolates every numeric character (HF's Digits(individual_digits=True)).
inline constexpr std::string_view kDigitSplitPattern = R"(\p{N})";

// One compiled PCRE2 pattern (UTF + Unicode properties).
class Regex {
 public:
  static Expected<Regex> create(std::string_view pattern);

  // Appends the [begin, end) byte ranges of the successive non-empty, non-overlapping matches in
  // `text`. Bytes that are not valid UTF-8 never match.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  using Code = std::unique_ptr<pcre2_real_code_8, CodeDeleter>;

  void find_all_valid(std::string_view text, size_t offset,
                      std::vector<std::pair<size_t, size_t>>& out) const;

  Code code_;
};

class RegexSplitter {
 public:
  // Each pattern splits every piece the previous ones produced into its matches and the text
  // between them; nothing is dropped, so the pieces always concatenate to the input.
  static Expected<RegexSplitter> create(std::span<const std::string> patterns);

  // Appends the pieces of `text` (views into it) to `out`. Bytes that are not valid UTF-8 are
  // not matched against the regexes; each becomes a piece of its own.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  std::vector<Regex> regexes_;
};

// Length of the longest prefix of `text` that is valid UTF-8 (as PCRE2 defines it: no overlong
// forms, surrogates or code points above U+10FFFF).
size_t valid_utf8_prefix(std::string_view text);

}  // namespace kestrel
