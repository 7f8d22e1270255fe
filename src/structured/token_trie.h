// structured/token_trie.h — the vocabulary as byte tries, built once per tokenizer, that the
// token mask walks: a subtree is skipped as soon as the grammar rejects its prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel::structured {

// Nodes in depth-first order, so that a walk is one loop that jumps to `end` to skip a subtree.
// Node 0 is the root (the empty prefix).
struct ByteTrie {
  struct Node {
    uint8_t byte;
    int32_t depth;      // bytes from the root
    int32_t end;        // one past the last node of this subtree
    int32_t ids_begin;  // tokens spelled exactly by this prefix: ids[ids_begin, ids_end)
    int32_t ids_end;
  };
  std::vector<Node> nodes;
  std::vector<int32_t> ids;
  int32_t max_depth = 0;
};

class TokenTrie {
 public:
  // Special tokens are left out (the matcher allows the EOS ids itself).
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tokenizer);
  // token_bytes[id] spells token id; empty ones are never generated.
  static std::shared_ptr<const TokenTrie> build(std::vector<std::string> token_bytes,
                                                std::vector<int32_t> eos_ids);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  std::string_view bytes(int32_t id) const;

  // Every token.
  const ByteTrie& all() const { return all_; }
  // Tokens that are not plain string text (see plain_string_chars).
  const ByteTrie& non_plain() const { return non_plain_; }
  // ORs into bits the plain string-text tokens of at most max_chars code points.
  void add_plain_tokens(int32_t max_chars, std::vector<uint64_t>& bits) const;
  // (code points, id) of the plain string-text tokens, by code points.
  const std::vector<std::pair<int32_t, int32_t>>& plain_by_chars() const { return plain_by_chars_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_ids_;
  ByteTrie all_;
  ByteTrie non_plain_;
  // plain_up_to_[k]: the plain tokens of at most k code points, for k up to the longest or 32
  // (longer ones are few and are added one by one), so that a maxLength costs no more than an
  // unbounded string.
  std::vector<std::vector<uint64_t>> plain_up_to_;
  std::vector<std::pair<int32_t, int32_t>> plain_by_chars_;
};

}  // namespace kestrel::structured
