// structured/state_cache.h — the byte matcher's states (sets of stacks) that one Matcher has
// met, interned, with their byte transitions and a few finished masks cached. The token mask
// walks hundreds of thousands of trie nodes per step, and most of them repeat transitions an
// earlier step already computed: inside a string or a repetition the state after a character
// is often the state before it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "structured/byte_matcher.h"
#include "structured/grammar.h"

namespace kestrel::structured {

class StateCache {
 public:
  static constexpr int32_t kReject = -1;
  static constexpr int32_t kFull = -2;  // no room for another state
  // Bounds the memory of one matcher (about 1 KiB of transitions per state).
  static constexpr size_t kMaxStates = 1024;
  static constexpr size_t kMaxMasks = 8;

  explicit StateCache(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {}
  // A copy starts empty: keys_ points into the map it came with, and a cache may forget.
  StateCache(const StateCache& o) : grammar_(o.grammar_) {}
  StateCache& operator=(const StateCache& o) {
    if (this != &o) *this = StateCache(o);
    return *this;
  }
  StateCache(StateCache&&) = default;
  StateCache& operator=(StateCache&&) = default;

  // Forgets everything once the cache is full, so that it never outgrows kMaxStates for long.
  void trim();
  // The id of a state, or kFull.
  int32_t intern(const std::vector<Stack>& stacks);
  // The state after `byte`: an id, kReject, or kFull.
  int32_t next(int32_t state, uint8_t byte) {
    const int32_t known = next_[static_cast<size_t>(state) * 256 + byte];
    return known != kUnknown ? known : compute(state, byte);
  }

  // The mask recorded for a state, or nullptr.
  const std::vector<uint64_t>* mask(int32_t state) const;
  void set_mask(int32_t state, const std::vector<uint64_t>& bits);

 private:
  static constexpr int32_t kUnknown = -3;

  int32_t compute(int32_t state, uint8_t byte);
  void load(int32_t state, std::vector<Stack>& out) const;

  std::shared_ptr<const Grammar> grammar_;
  // Each state's frames, serialized; keys_ points into ids_ (whose nodes do not move).
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string_view> keys_;
  std::vector<int32_t> next_;  // [state * 256 + byte]
  std::deque<std::pair<int32_t, std::vector<uint64_t>>> masks_;
  std::vector<Stack> from_;  // the stacks of state loaded_
  int32_t loaded_ = -1;
  std::vector<Stack> to_;
};

}  // namespace kestrel::structured
