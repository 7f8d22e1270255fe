#include "structured/token_trie.h"

#include <algorithm>

#include "structured/byte_matcher.h"

namespace kestrel::structured {
namespace {

// Builds the trie of the tokens in `ids` (non-empty spellings only).
ByteTrie build_trie(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
    return bytes[x] != bytes[y] ? bytes[x] < bytes[y] : x < y;
  });
  ByteTrie trie;
  trie.nodes.push_back({0, 0, 0, 0, 0});
  // path[d]: the open node at depth d on the way to the previous token.
  std::vector<int32_t> path = {0};
  std::string_view prev;
  for (const int32_t id : ids) {
    const std::string_view s = bytes[id];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common + 1) {
      trie.nodes[path.back()].end = static_cast<int32_t>(trie.nodes.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      const auto index = static_cast<int32_t>(trie.nodes.size());
      const auto ids_at = static_cast<int32_t>(trie.ids.size());
      trie.nodes.push_back(
          {static_cast<uint8_t>(s[k]), static_cast<int32_t>(k + 1), 0, ids_at, ids_at});
      path.push_back(index);
    }
    // Ids sharing a spelling arrive together, so each node's ids are contiguous.
    ByteTrie::Node& node = trie.nodes[path.back()];
    if (node.ids_begin == node.ids_end) node.ids_begin = static_cast<int32_t>(trie.ids.size());
    trie.ids.push_back(id);
    node.ids_end = static_cast<int32_t>(trie.ids.size());
    trie.max_depth = std::max(trie.max_depth, static_cast<int32_t>(s.size()));
    prev = s;
  }
  while (!path.empty()) {
    trie.nodes[path.back()].end = static_cast<int32_t>(trie.nodes.size());
    path.pop_back();
  }
  return trie;
}

void set_bit(std::vector<uint64_t>& bits, int32_t id) {
  bits[id / 64] |= uint64_t{1} << (id % 64);
}

constexpr int32_t kPlainLevels = 32;

}  // namespace

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[id] = tokenizer.token_bytes(id);
  }
  return build(std::move(bytes), tokenizer.eos_ids());
}

std::shared_ptr<const TokenTrie> TokenTrie::build(std::vector<std::string> token_bytes,
                                                  std::vector<int32_t> eos_ids) {
  auto trie = std::make_shared<TokenTrie>();
  trie->bytes_ = std::move(token_bytes);
  trie->eos_ids_ = std::move(eos_ids);
  const std::vector<std::string>& bytes = trie->bytes_;
  // EOS tokens are allowed by the matcher, never through their spelling.
  std::vector<bool> skip(bytes.size(), false);
  for (const int32_t id : trie->eos_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < bytes.size()) skip[id] = true;
  }
  std::vector<int32_t> all;
  std::vector<int32_t> non_plain;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (bytes[i].empty() || skip[i]) continue;
    all.push_back(id);
    if (const std::optional<int32_t> chars = plain_string_chars(bytes[i])) {
      trie->plain_by_chars_.emplace_back(*chars, id);
    } else {
      non_plain.push_back(id);
    }
  }
  std::sort(trie->plain_by_chars_.begin(), trie->plain_by_chars_.end());
  const std::vector<std::pair<int32_t, int32_t>>& plain = trie->plain_by_chars_;
  const int32_t longest = plain.empty() ? 0 : plain.back().first;
  std::vector<uint64_t> level((bytes.size() + 63) / 64, 0);
  auto next = plain.begin();
  for (int32_t k = 0; k <= std::min(longest, kPlainLevels); ++k) {
    for (; next != plain.end() && next->first == k; ++next) set_bit(level, next->second);
    trie->plain_up_to_.push_back(level);
  }
  trie->all_ = build_trie(bytes, std::move(all));
  trie->non_plain_ = build_trie(bytes, std::move(non_plain));
  return trie;
}

std::string_view TokenTrie::bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  return bytes_[id];
}

void TokenTrie::add_plain_tokens(int32_t max_chars, std::vector<uint64_t>& bits) const {
  const auto top = static_cast<int32_t>(plain_up_to_.size()) - 1;
  const int32_t level = std::min(max_chars, top);
  const std::vector<uint64_t>& base = plain_up_to_[level];
  for (size_t w = 0; w < base.size(); ++w) bits[w] |= base[w];
  if (max_chars <= level) return;
  auto it = std::upper_bound(plain_by_chars_.begin(), plain_by_chars_.end(),
                             std::pair<int32_t, int32_t>(level, kUnbounded));
  for (; it != plain_by_chars_.end() && it->first <= max_chars; ++it) set_bit(bits, it->second);
}

}  // namespace kestrel::structured
