// kv/block_hash.h — chained content hashes of full KV blocks for prefix caching.
// A block's hash covers its parent's hash, so equal hashes mean equal whole prefixes (up to
// collisions, which BlockPool::lookup rules out by comparing the stored tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace kestrel {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo); }
};

// XXH3-128 of (parent or "none", tokens, extra_keys). extra_keys carry whatever else decides the
// KV contents besides the tokens (LoRA id, cache salt, multimodal input hashes).
BlockHash hash_block(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens,
                     std::span<const uint64_t> extra_keys);

// Extends `hashes` (the chain of the first hashes.size() blocks) over every further FULL block of
// `tokens`; a trailing partial block is not hashed.
void extend_block_hashes(std::span<const int32_t> tokens, int32_t block_size,
                         std::span<const uint64_t> extra_keys, std::vector<BlockHash>* hashes);

}  // namespace kestrel
