// tests/kv/kv_test_hashes.h — the block hashes a request would carry (sched/request.h keeps
// them as its tokens grow), for tests that drive the KV cache manager directly.
#pragma once

#include <span>
#include <vector>

#include "kv/block_hash.h"
#include "kv/kv_cache_manager.h"

namespace kestrel::test {

inline std::vector<BlockHash> hashes_of(const KVCacheManager& m, std::span<const int32_t> tokens,
                                        std::span<const uint64_t> extra_keys = {}) {
  std::vector<BlockHash> out;
  extend_block_hashes(tokens, m.block_size(), extra_keys, &out);
  return out;
}

}  // namespace kestrel::test
