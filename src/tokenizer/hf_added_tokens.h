// tokenizer/hf_added_tokens.h — finding the "added_tokens" of tokenizer.json in text: leftmost,
// longest first, with their single_word / lstrip / rstrip rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

struct HfAddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;      // a control token: decode(skip_special_tokens) drops it
  bool single_word = false;  // only matched when not inside a word
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool normalized = false;   // matched in the normalized text rather than the raw text
};

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;
    size_t end;  // past the token and any whitespace it strips
    int32_t id;
  };

  explicit AddedTokenMatcher(const std::vector<HfAddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // Appends the non-overlapping matches in `text`, in order.
  void find_all(std::string_view text, std::vector<Match>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;  // index into tokens_ of the token ending here
  };

  std::vector<HfAddedToken> tokens_;
  std::vector<Node> trie_;
};

}  // namespace kestrel
