// tokenizer/hf_pattern.h — the {"String": ...} / {"Regex": ...} patterns of tokenizer.json.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tokenizer/pre_tokenizer.h"

namespace kestrel {

// Rewrites a pattern written for the Rust regex crate (what tokenizer.json files hold) so that
// PCRE2 gives it the same meaning: \s and \S become explicit White_Space classes.
std::string rust_regex_to_pcre2(std::string_view pattern);

class HfPattern {
 public:
  static Expected<HfPattern> parse(const nlohmann::json& j);
  static HfPattern literal(std::string text);

  // The [begin, end) ranges of the successive non-overlapping matches.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

}  // namespace kestrel
