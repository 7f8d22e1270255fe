// tokenizer/bpe_merge.cc — the BPE merge loop: a heap of candidate pairs with lazy invalidation
// makes it O(n log n) in the number of symbols.
#include "tokenizer/bpe_merge.h"

#include <algorithm>

namespace kestrel {

void bpe_merge(std::span<const int32_t> symbols, const BpeMergeMap& merges,
               std::vector<int32_t>& out) {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Pair {
    int32_t rank;
    int32_t left;  // position of the left symbol
    int32_t left_id;
    int32_t right_id;
    int32_t result;
  };
  if (symbols.empty()) return;
  std::vector<Symbol> syms;
  syms.reserve(symbols.size());
  for (int32_t id : symbols) {
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, i + 1});
  }
  syms.back().next = -1;
  const auto n = static_cast<int32_t>(syms.size());
  // std heaps put the greatest element first; "greater" here means a worse pair.
  const auto worse = [](const Pair& a, const Pair& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::vector<Pair> heap;
  const auto consider = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    const int32_t left_id = syms[left].id;
    const int32_t right_id = syms[syms[left].next].id;
    const auto it = merges.find(bpe_pair_key(left_id, right_id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, left, left_id, right_id, it->second.result});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Pair p = heap.back();
    heap.pop_back();
    Symbol& left = syms[p.left];
    // A merged symbol only ever grows, so matching ids prove the pair is still adjacent.
    if (left.id != p.left_id || left.next < 0) continue;
    Symbol& right = syms[left.next];
    if (right.id != p.right_id) continue;
    left.id = p.result;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = p.left;
    right.id = -1;
    consider(left.prev);
    consider(p.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace kestrel
