#include "kv/block_pool.h"

#include <algorithm>

#include <fmt/format.h>

namespace kestrel {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_counts_(num_blocks, 0),
      prev_(num_blocks, kNone),
      next_(num_blocks, kNone),
      block_hash_(num_blocks),
      block_tokens_(num_blocks) {
  KCHECK(num_blocks >= 1, "a block pool needs at least the null block, got {}", num_blocks);
  for (BlockId b = 1; b < num_blocks; ++b) push_tail(b);
}

double BlockPool::usage() const {
  const int32_t usable = num_blocks() - 1;
  return usable == 0 ? 0.0 : 1.0 - static_cast<double>(num_free_) / usable;
}

void BlockPool::push_tail(BlockId b) {
  prev_[b] = tail_;
  next_[b] = kNone;
  if (tail_ != kNone) {
    next_[tail_] = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  ++num_free_;
}

void BlockPool::unlink(BlockId b) {
  if (prev_[b] != kNone) {
    next_[prev_[b]] = next_[b];
  } else {
    head_ = next_[b];
  }
  if (next_[b] != kNone) {
    prev_[next_[b]] = prev_[b];
  } else {
    tail_ = prev_[b];
  }
  prev_[b] = next_[b] = kNone;
  --num_free_;
}

void BlockPool::uncache(BlockId b) {
  if (!block_hash_[b]) return;
  cache_.erase(*block_hash_[b]);
  block_hash_[b].reset();
  block_tokens_[b].clear();
}

Expected<std::vector<BlockId>> BlockPool::allocate(int32_t n) {
  if (n < 0) return make_error("block pool: cannot allocate {} blocks", n);
  if (n > num_free_) {
    return make_error("block pool: {} blocks requested, {} free", n, num_free_);
  }
  std::vector<BlockId> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    uncache(b);
    ref_counts_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b == kNullBlock) continue;
    KCHECK(b > 0 && b < num_blocks() && ref_counts_[b] > 0, "freeing block {} (refcount {})", b,
           b > 0 && b < num_blocks() ? ref_counts_[b] : -1);
    if (--ref_counts_[b] == 0) push_tail(b);
  }
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b == kNullBlock) continue;
    KCHECK(b > 0 && b < num_blocks(), "touching block {} of {}", b, num_blocks());
    if (ref_counts_[b]++ == 0) unlink(b);
  }
}

bool BlockPool::cache_full_block(BlockId block, const BlockHash& hash,
                                 std::span<const int32_t> tokens) {
  KCHECK(block > 0 && block < num_blocks() && ref_counts_[block] > 0,
         "caching block {} which is not in use", block);
  if (block_hash_[block] || cache_.contains(hash)) return false;
  cache_.emplace(hash, block);
  block_hash_[block] = hash;
  block_tokens_[block].assign(tokens.begin(), tokens.end());
  return true;
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& hash,
                                         std::span<const int32_t> tokens) const {
  const auto it = cache_.find(hash);
  if (it == cache_.end()) return std::nullopt;
  const std::vector<int32_t>& stored = block_tokens_[it->second];
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return std::nullopt;
  return it->second;
}

int32_t BlockPool::ref_count(BlockId block) const {
  KCHECK(block >= 0 && block < num_blocks(), "block {} of {}", block, num_blocks());
  return ref_counts_[block];
}

bool BlockPool::is_cached(BlockId block) const {
  KCHECK(block >= 0 && block < num_blocks(), "block {} of {}", block, num_blocks());
  return block_hash_[block].has_value();
}

std::string BlockPool::check_invariants() const {
  const int32_t n = num_blocks();
  if (ref_counts_[kNullBlock] != 0 || block_hash_[kNullBlock] || head_ == kNullBlock) {
    return "null block is referenced, cached or free";
  }
  std::vector<bool> on_list(n, false);
  int32_t count = 0;
  BlockId prev = kNone;
  for (BlockId b = head_; b != kNone; prev = b, b = next_[b]) {
    if (b <= 0 || b >= n) return fmt::format("free list holds invalid id {}", b);
    if (on_list[b] || count >= n) return fmt::format("free list revisits block {}", b);
    if (prev_[b] != prev) return fmt::format("block {} prev link {} != {}", b, prev_[b], prev);
    if (ref_counts_[b] != 0) {
      return fmt::format("free block {} has refcount {}", b, ref_counts_[b]);
    }
    on_list[b] = true;
    ++count;
  }
  if (tail_ != prev) return fmt::format("tail {} != last listed block {}", tail_, prev);
  if (count != num_free_) return fmt::format("free list length {} != count {}", count, num_free_);
  for (BlockId b = 1; b < n; ++b) {
    if (ref_counts_[b] < 0) return fmt::format("block {} refcount {}", b, ref_counts_[b]);
    if (ref_counts_[b] == 0 && !on_list[b]) return fmt::format("block {} leaked", b);
    if (block_hash_[b]) {
      const auto it = cache_.find(*block_hash_[b]);
      if (it == cache_.end() || it->second != b) {
        return fmt::format("cached block {} is missing from the hash map", b);
      }
    }
  }
  for (const auto& [hash, b] : cache_) {
    if (b <= 0 || b >= n || !block_hash_[b] || !(*block_hash_[b] == hash)) {
      return fmt::format("hash map entry points at block {} whose hash differs", b);
    }
  }
  return {};
}

}  // namespace kestrel
