#include "structured/matcher.h"

#include <algorithm>
#include <utility>

namespace kestrel::structured {
namespace {

void set_bit(std::vector<uint64_t>& bits, int32_t id) {
  bits[id / 64] |= uint64_t{1} << (id % 64);
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : bytes_(std::move(grammar)), trie_(std::move(trie)) {
  levels_.resize(std::max(trie_->all().max_depth, trie_->non_plain().max_depth) + 1);
}

void Matcher::fill_mask(std::vector<uint64_t>& allowed_bits) {
  allowed_bits.assign((trie_->vocab_size() + 63) / 64, 0);
  if (ended_) return;
  if (bytes_.accepting()) {
    for (const int32_t id : trie_->eos_ids()) {
      if (id >= 0 && id < trie_->vocab_size()) set_bit(allowed_bits, id);
    }
  }
  const std::vector<Stack>& stacks = bytes_.stacks();
  // Inside string text (most of a typical output) nearly every token is allowed: the plain
  // ones come from a precomputed set, and only the rest is walked.
  if (stacks.size() == 1 && in_string_text(stacks[0])) {
    const Frame& top = stacks[0].top();
    const int32_t max_length = bytes_.grammar().nodes[top.id].max_length;
    trie_->add_plain_tokens(max_length - top.a, allowed_bits);
    walk(trie_->non_plain(), allowed_bits);
    return;
  }
  walk(trie_->all(), allowed_bits);
}

void Matcher::walk(const ByteTrie& trie, std::vector<uint64_t>& bits) {
  const Grammar& g = bytes_.grammar();
  levels_[0] = bytes_.stacks();
  const auto n = static_cast<int32_t>(trie.nodes.size());
  for (int32_t i = 1; i < n;) {
    const ByteTrie::Node& node = trie.nodes[i];
    const std::vector<Stack>& parent = levels_[node.depth - 1];
    std::vector<Stack>& here = levels_[node.depth];
    here.clear();
    for (const Stack& s : parent) advance(g, s, node.byte, here);
    if (here.empty()) {
      i = node.end;
      continue;
    }
    dedupe(here);
    for (int32_t k = node.ids_begin; k < node.ids_end; ++k) set_bit(bits, trie.ids[k]);
    ++i;
  }
}

bool Matcher::accept(int32_t token) {
  if (ended_) return false;
  const std::vector<int32_t>& eos = trie_->eos_ids();
  if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
    if (!bytes_.accepting()) return false;
    ended_ = true;
    return true;
  }
  const std::string_view bytes = trie_->bytes(token);
  return !bytes.empty() && bytes_.feed(bytes);
}

}  // namespace kestrel::structured
