#include "kv/group_manager.h"

#include <algorithm>

#include "base/status.h"

namespace kestrel {

GroupManager::GroupManager(const KVCacheSpec& spec, int32_t group, BlockPool& pool)
    : spec_(spec), group_(group), pool_(pool) {}

BlockHash GroupManager::key(const BlockHash& h) const {
  // Group 0 keeps the plain chain; others move it by a per-group constant.
  return BlockHash{h.lo ^ (uint64_t(group_) * 0x9E3779B97F4A7C15ull), h.hi};
}

std::vector<BlockId> GroupManager::find_hit(std::span<const BlockHash> hashes,
                                            std::span<const int32_t> tokens,
                                            size_t max_blocks) const {
  const size_t bs = size_t(spec_.block_size);
  const size_t n = std::min(max_blocks, hashes.size());
  auto cached = [&](size_t i) { return pool_.lookup(key(hashes[i]), tokens.subspan(i * bs, bs)); };
  std::vector<BlockId> out;
  if (!sliding()) {
    for (size_t i = 0; i < n; ++i) {
      const auto b = cached(i);
      if (!b) break;
      out.push_back(*b);
    }
    return out;
  }
  // A query at position e·bs reads the window - 1 keys before it: the `need` blocks ending at
  // block e. Wanted: the largest e ≤ n whose blocks [e - need, e) are all cached (near the
  // start, every block before e).
  const size_t need = size_t(spec_.sliding_window - 1 + spec_.block_size - 1) / bs;
  std::vector<BlockId> found(n, kNullBlock);
  size_t e = n;
  while (e > 0) {
    size_t got = 0;
    while (got < need && got < e) {
      const auto b = cached(e - 1 - got);
      if (!b) break;
      found[e - 1 - got] = *b;
      ++got;
    }
    if (got == need || got == e) {
      out.assign(e, kNullBlock);
      std::copy(found.begin() + ptrdiff_t(e - got), found.begin() + ptrdiff_t(e),
                out.begin() + ptrdiff_t(e - got));
      return out;
    }
    // Block e - 1 - got is missing, so no end in (e - 1 - got, e] works; try ending at it.
    e -= got + 1;
  }
  return out;
}

void GroupManager::remove_skipped(RequestHandle id, int64_t num_computed_tokens) {
  if (!sliding()) return;
  std::vector<BlockId>* table = tables_.find(id);
  if (table == nullptr) return;
  // Keys before p - window + 1 are out of every later query's window (queries start at p).
  const int64_t skipped = std::max<int64_t>(0, num_computed_tokens - spec_.sliding_window + 1);
  const size_t whole = size_t(skipped / spec_.block_size);
  std::vector<BlockId>& t = *table;
  std::vector<BlockId> dropped;
  for (size_t i = 0; i < std::min(whole, t.size()); ++i) {
    if (t[i] == kNullBlock) continue;
    dropped.push_back(t[i]);
    t[i] = kNullBlock;
  }
  pool_.free(dropped);
}

int64_t GroupManager::num_blocks_needed(RequestHandle id, int64_t num_positions,
                                        std::span<const BlockId> hit) const {
  const std::vector<BlockId>* table = tables_.find(id);
  const int64_t held = table == nullptr ? 0 : int64_t(table->size());
  const int64_t want = (num_positions + spec_.block_size - 1) / spec_.block_size;
  int64_t from_free = std::max<int64_t>(0, want - held - int64_t(hit.size()));
  // Hit blocks sitting on the free list stop being free once touched.
  for (const BlockId b : hit) from_free += b != kNullBlock && pool_.ref_count(b) == 0 ? 1 : 0;
  return from_free;
}

void GroupManager::allocate(RequestHandle id, int64_t num_positions, std::span<const BlockId> hit) {
  std::vector<BlockId>& t = tables_[id];
  KCHECK(hit.empty() || t.empty(), "request {}: a prefix hit for a request holding blocks", id);
  pool_.touch(hit);
  t.insert(t.end(), hit.begin(), hit.end());
  const int64_t want = (num_positions + spec_.block_size - 1) / spec_.block_size;
  if (want <= int64_t(t.size())) return;
  Expected<std::vector<BlockId>> fresh = pool_.allocate(int32_t(want - int64_t(t.size())));
  KCHECK(fresh.ok(), "{}", fresh.error().message);
  t.insert(t.end(), fresh->begin(), fresh->end());
}

void GroupManager::cache(RequestHandle id, std::span<const BlockHash> hashes, size_t first,
                         std::span<const int32_t> tokens, std::vector<BlockId>* published) {
  const std::vector<BlockId>* table = tables_.find(id);
  KCHECK(table != nullptr, "caching blocks of unknown request {}", id);
  const std::vector<BlockId>& t = *table;
  const size_t bs = size_t(spec_.block_size);
  for (size_t i = first; i < hashes.size() && i < t.size(); ++i) {
    // Null entries are a hit's padding: nothing of this request's to publish there. A false
    // return means an identical block is already cached; this copy simply stays private.
    if (t[i] != kNullBlock &&
        pool_.cache_full_block(t[i], key(hashes[i]), tokens.subspan(i * bs, bs)) &&
        published != nullptr)
      published->push_back(t[i]);
  }
}

void GroupManager::free(RequestHandle id) {
  std::vector<BlockId>* blocks = tables_.find(id);
  if (blocks == nullptr) return;
  // Tail blocks first: they are the least likely to be shared, so they should be evicted first.
  std::reverse(blocks->begin(), blocks->end());
  pool_.free(*blocks);
  tables_.erase(id);
}

std::vector<BlockId> GroupManager::detach(RequestHandle id) {
  std::vector<BlockId>* blocks = tables_.find(id);
  if (blocks == nullptr) return {};
  std::vector<BlockId> out = std::move(*blocks);
  tables_.erase(id);
  return out;
}

std::span<const BlockId> GroupManager::table(RequestHandle id) const {
  const std::vector<BlockId>* t = tables_.find(id);
  if (t == nullptr) return {};
  return *t;
}

int64_t GroupManager::num_held(RequestHandle id) const {
  const std::span<const BlockId> t = table(id);
  return int64_t(std::count_if(t.begin(), t.end(), [](BlockId b) { return b != kNullBlock; }));
}

}  // namespace kestrel
