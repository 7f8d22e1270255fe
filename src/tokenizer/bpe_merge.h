// tokenizer/bpe_merge.h — the BPE merge loop shared by every BPE vocabulary: adjacent symbols are
// merged by rank until no pair of neighbours has a merge.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kestrel {

struct BpeMerge {
  int32_t rank = 0;    // lower merges first
  int32_t result = 0;  // the id of the merged token
};

// Keyed by bpe_pair_key(left id, right id).
using BpeMergeMap = std::unordered_map<uint64_t, BpeMerge>;

inline uint64_t bpe_pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Merges `symbols` (token ids, in order) best rank first, leftmost first among equal ranks, and
// appends the resulting ids to `out`.
void bpe_merge(std::span<const int32_t> symbols, const BpeMergeMap& merges,
               std::vector<int32_t>& out);

}  // namespace kestrel
