// structured/matcher.h — per-request constrained decoding: which tokens keep the output inside
// the grammar (fill_mask, once per decode step) and the state update for the chosen token.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "structured/byte_matcher.h"
#include "structured/grammar.h"
#include "structured/state_cache.h"
#include "structured/token_trie.h"

namespace kestrel::structured {

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  // allowed_bits gets ceil(vocab/64) words; bit i set = token i allowed. EOS ids are allowed
  // exactly when the output so far is a complete document.
  void fill_mask(std::vector<uint64_t>& allowed_bits);
  // False, with the state unchanged, when the token would leave the grammar.
  bool accept(int32_t token);
  // The document is complete and nothing but EOS may follow (or EOS was accepted).
  bool done() const { return ended_ || bytes_.done(); }
  // EOS may be chosen now.
  bool accepting() const { return !ended_ && bytes_.accepting(); }

  const ByteMatcher& byte_matcher() const { return bytes_; }

  // The state after the tokens accepted so far, to return to after trying speculative drafts.
  struct Checkpoint {
    ByteMatcher bytes;
    bool ended;
  };
  Checkpoint checkpoint() const { return Checkpoint{bytes_, ended_}; }
  void restore(const Checkpoint& c) {
    bytes_ = c.bytes;
    ended_ = c.ended;
  }

 private:
  void walk(const ByteTrie& trie, int32_t state, std::vector<uint64_t>& bits);
  // Through the state cache; false when it filled up on the way (bits then hold a subset).
  bool walk_cached(const ByteTrie& trie, int32_t state, std::vector<uint64_t>& bits);
  void walk_direct(const ByteTrie& trie, std::vector<uint64_t>& bits);

  ByteMatcher bytes_;
  std::shared_ptr<const TokenTrie> trie_;
  StateCache cache_;
  std::vector<int32_t> ids_;                // cached walk: state after each prefix depth
  std::vector<std::vector<Stack>> levels_;  // direct walk: the same as stacks
  bool ended_ = false;
};

}  // namespace kestrel::structured
