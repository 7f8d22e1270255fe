// tokenizer/hf_added_tokens.cc — a byte trie over the added tokens; at each position the
// longest token starting there wins, and the leftmost position with a match goes first.
#include "tokenizer/hf_added_tokens.h"

#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

// A \w character, as the Rust regex crate defines it closely enough for word boundaries:
// letters, marks, digits and connector punctuation; non-ASCII characters count as letters unless
// they are white space.
bool is_word_char(char32_t cp, bool valid) {
  if (!valid) return false;
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  return !is_white_space(cp);
}

size_t last_char_start(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool ends_with_word(std::string_view text) {
  if (text.empty()) return false;
  const size_t i = last_char_start(text);
  const Utf8Char c = next_utf8_char(text, i);
  return i + c.length == text.size() && is_word_char(c.cp, c.valid);
}

bool starts_with_word(std::string_view text) {
  if (text.empty()) return false;
  const Utf8Char c = next_utf8_char(text, 0);
  return is_word_char(c.cp, c.valid);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<HfAddedToken>& tokens) : trie_(1) {
  for (const HfAddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t node = 0;
    for (char ch : t.content) {
      const auto c = static_cast<unsigned char>(ch);
      int32_t next = -1;
      for (const auto& [label, child] : trie_[node].children) {
        if (label == c) next = child;
      }
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        trie_[node].children.emplace_back(c, next);
        trie_.emplace_back();
      }
      node = next;
    }
    if (trie_[node].token < 0) {
      trie_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(t);
    }
  }
}

void AddedTokenMatcher::find_all(std::string_view text, std::vector<Match>& out) const {
  if (tokens_.empty()) return;
  size_t done = 0;  // end of the previous match
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      int32_t next = -1;
      for (const auto& [label, child] : trie_[node].children) {
        if (label == static_cast<unsigned char>(text[i])) next = child;
      }
      if (next < 0) break;
      node = next;
      if (trie_[node].token >= 0) {
        best = trie_[node].token;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const HfAddedToken& t = tokens_[best];
    size_t begin = pos;
    size_t end = best_end;
    pos = best_end;
    if (t.single_word &&
        (ends_with_word(text.substr(0, begin)) || starts_with_word(text.substr(end)))) {
      continue;
    }
    if (t.lstrip) {
      while (begin > done) {
        const size_t start = last_char_start(text.substr(0, begin));
        const Utf8Char c = next_utf8_char(text, start);
        if (!c.valid || !is_white_space(c.cp) || start < done) break;
        begin = start;
      }
    }
    if (t.rstrip) {
      while (end < text.size()) {
        const Utf8Char c = next_utf8_char(text, end);
        if (!c.valid || !is_white_space(c.cp)) break;
        end += c.length;
      }
    }
    out.push_back({begin, end, t.id});
    done = pos = end;
  }
}

}  // namespace kestrel
