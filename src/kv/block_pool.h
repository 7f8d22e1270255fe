// kv/block_pool.h — bookkeeping for the fixed set of KV blocks: refcounts, the LRU free list and
// the prefix-cache map. Owns no memory for K/V itself; a block id indexes the backend's buffers.
// Only the engine thread touches it.
//
// A block is either in use (refcount > 0) or on the free list. Free blocks keep their cached
// contents (hash and tokens) until allocate() reuses them, so a later request can still hit them;
// the list head is evicted first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kv/block_hash.h"

namespace kestrel {

using BlockId = int32_t;

// Block 0 is never handed out: block tables use it as padding (e.g. for blocks a sliding window
// has dropped), so kernels always see a valid id.
inline constexpr BlockId kNullBlock = 0;

class BlockPool {
 public:
  // num_blocks includes the null block, so num_blocks - 1 are usable.
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return num_free_; }
  // Fraction of usable blocks in use, in [0, 1].
  double usage() const;

  // n blocks with refcount 1, taken from the LRU head; a cached block loses its hash entry.
  // Errors, changing nothing, when fewer than n are free.
  Expected<std::vector<BlockId>> allocate(int32_t n);
  // Drops one reference per block; a block reaching 0 goes to the free-list tail, in the order
  // given, so the first of `blocks` to reach 0 is evicted first. The null block is skipped.
  void free(std::span<const BlockId> blocks);
  // Takes one reference per block (a prefix hit), pulling blocks at refcount 0 off the free list.
  // The null block is skipped.
  void touch(std::span<const BlockId> blocks);

  // Registers an in-use full block under `hash`, keeping `tokens` to verify later hits. Returns
  // false (and caches nothing) when the block is already cached or another block holds the hash.
  bool cache_full_block(BlockId block, const BlockHash& hash, std::span<const int32_t> tokens);
  // The block cached under `hash` if its stored tokens equal `tokens`.
  std::optional<BlockId> lookup(const BlockHash& hash, std::span<const int32_t> tokens) const;
  // Withdraws `block` from the prefix cache if it holds an entry (its contents were never
  // written, e.g. the step that was to compute them failed). The block stays allocated.
  void uncache(BlockId block);

  int32_t ref_count(BlockId block) const;
  bool is_cached(BlockId block) const;
  size_t num_cached() const { return cache_.size(); }

  // Empty when every structural invariant holds, else a description of the first violation.
  std::string check_invariants() const;

 private:
  static constexpr BlockId kNone = -1;

  void push_tail(BlockId b);
  void unlink(BlockId b);

  std::vector<int32_t> ref_counts_;
  // Intrusive doubly linked free list over block ids; kNone ends it.
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  BlockId head_ = kNone;
  BlockId tail_ = kNone;
  int32_t num_free_ = 0;

  std::vector<std::optional<BlockHash>> block_hash_;
  std::vector<std::vector<int32_t>> block_tokens_;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> cache_;
};

}  // namespace kestrel
