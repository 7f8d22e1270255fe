// kv/group_manager.h — the block tables of one KV cache group, one per request, over the shared
// BlockPool, with the rules of the group's kind: full attention keeps every block; a sliding
// window frees the blocks no later query can see (their table entries become the null block)
// and needs only the blocks of the last window for a prefix hit. The KVCacheManager
// (kv/kv_cache_manager.h) coordinates one per group; only the engine thread touches them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/request_table.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_spec.h"

namespace kestrel {

class GroupManager {
 public:
  GroupManager(const KVCacheSpec& spec, int32_t group, BlockPool& pool);

  const KVCacheSpec& spec() const { return spec_; }

  // The longest prefix of `hashes` (chained hashes of the request's full blocks, at most
  // max_blocks of them) this group can start from: its blocks, the null block where the group
  // needs none (a sliding window's dropped ones). Empty when there is none.
  std::vector<BlockId> find_hit(std::span<const BlockHash> hashes, std::span<const int32_t> tokens,
                                size_t max_blocks) const;

  // Frees the request's blocks no query from position num_computed_tokens on can read (a
  // sliding window's; none for full attention). Safe at any time: they are not needed again.
  void remove_skipped(RequestHandle id, int64_t num_computed_tokens);
  // Blocks the request needs taken from the free list to hold `num_positions` positions, given
  // the prefix hit `hit` for a request that holds nothing yet.
  int64_t num_blocks_needed(RequestHandle id, int64_t num_positions,
                            std::span<const BlockId> hit) const;
  // Appends the hit, then fresh blocks up to `num_positions`; the caller made sure they fit.
  void allocate(RequestHandle id, int64_t num_positions, std::span<const BlockId> hit);
  // Publishes the request's blocks [first, hashes.size()) under its chained hashes; the blocks
  // this group newly cached are appended to `published` when given.
  void cache(RequestHandle id, std::span<const BlockHash> hashes, size_t first,
             std::span<const int32_t> tokens, std::vector<BlockId>* published);
  void free(RequestHandle id);
  // The request's table, removed without freeing its blocks (the caller now holds them).
  std::vector<BlockId> detach(RequestHandle id);

  std::span<const BlockId> table(RequestHandle id) const;
  // Blocks the request holds (its table without null entries).
  int64_t num_held(RequestHandle id) const;

 private:
  // The pool's key for this group's copy of a block: groups never share blocks.
  BlockHash key(const BlockHash& h) const;
  bool sliding() const { return spec_.kind == KVCacheKind::kSlidingWindow; }

  KVCacheSpec spec_;
  int32_t group_;
  BlockPool& pool_;
  RequestTable<std::vector<BlockId>> tables_;
};

}  // namespace kestrel
