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
    : bytes_(grammar), trie_(std::move(trie)), cache_(std::move(grammar)) {
  const int32_t depth = std::max(trie_->all().max_depth, trie_->non_plain().max_depth) + 1;
  ids_.resize(depth);
  levels_.resize(depth);
}

void Matcher::fill_mask(std::vector<uint64_t>& allowed_bits) {
  allowed_bits.assign((trie_->vocab_size() + 63) / 64, 0);
  if (ended_) return;
  // JSON grammars have their own shortcut for string text (plain tokens), and their frames
  // count characters, so their states seldom repeat: there the cache would only add work.
  int32_t state = -1;
  if (bytes_.grammar().generic) {
    cache_.trim();
    state = cache_.intern(bytes_.stacks());
  }
  if (state >= 0) {
    if (const std::vector<uint64_t>* known = cache_.mask(state)) {
      allowed_bits = *known;
      return;
    }
  }
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
    walk(trie_->non_plain(), state, allowed_bits);
  } else {
    walk(trie_->all(), state, allowed_bits);
  }
  if (state >= 0) cache_.set_mask(state, allowed_bits);
}

void Matcher::walk(const ByteTrie& trie, int32_t state, std::vector<uint64_t>& bits) {
  if (state >= 0 && walk_cached(trie, state, bits)) return;
  walk_direct(trie, bits);
}

bool Matcher::walk_cached(const ByteTrie& trie, int32_t state, std::vector<uint64_t>& bits) {
  ids_[0] = state;
  const auto n = static_cast<int32_t>(trie.nodes.size());
  for (int32_t i = 1; i < n;) {
    const ByteTrie::Node& node = trie.nodes[i];
    const int32_t next = cache_.next(ids_[node.depth - 1], node.byte);
    if (next == StateCache::kFull) return false;
    if (next == StateCache::kReject) {
      i = node.end;
      continue;
    }
    ids_[node.depth] = next;
    for (int32_t k = node.ids_begin; k < node.ids_end; ++k) set_bit(bits, trie.ids[k]);
    ++i;
  }
  return true;
}

void Matcher::walk_direct(const ByteTrie& trie, std::vector<uint64_t>& bits) {
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
