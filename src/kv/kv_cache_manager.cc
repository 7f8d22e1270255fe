#include "kv/kv_cache_manager.h"

#include <algorithm>

namespace kestrel {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : pool_(num_blocks), block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
  KCHECK(block_size > 0, "block size {}", block_size);
}

ComputedBlocks KVCacheManager::get_computed_blocks(std::span<const int32_t> tokens,
                                                   std::span<const uint64_t> extra_keys) {
  ComputedBlocks out;
  if (!enable_prefix_caching_ || tokens.empty()) return out;
  // Only blocks that end before the last token can be reused.
  extend_block_hashes(tokens.first(tokens.size() - 1), block_size_, extra_keys, &out.hashes);
  for (size_t i = 0; i < out.hashes.size(); ++i) {
    const auto hit = pool_.lookup(out.hashes[i], tokens.subspan(i * block_size_, block_size_));
    if (!hit) break;
    out.blocks.push_back(*hit);
  }
  out.hashes.resize(out.blocks.size());
  out.num_tokens = static_cast<int64_t>(out.blocks.size()) * block_size_;
  out.num_queried_tokens = static_cast<int64_t>(tokens.size());
  return out;
}

bool KVCacheManager::allocate_slots(const RequestId& id, int64_t num_new_tokens,
                                    const ComputedBlocks& computed, int64_t num_lookahead_tokens) {
  KCHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0, "negative token count {} / {}",
         num_new_tokens, num_lookahead_tokens);
  const auto it = requests_.find(id);
  const RequestBlocks* existing = it == requests_.end() ? nullptr : &it->second;
  const int64_t held_blocks = existing ? static_cast<int64_t>(existing->blocks.size()) : 0;
  const int64_t held_slots = existing ? existing->num_slots : 0;
  KCHECK(computed.blocks.empty() || held_blocks == 0,
         "request {} already holds blocks; prefix hits apply to a fresh request only", id);
  KCHECK(computed.hashes.size() == computed.blocks.size(), "computed blocks and hashes differ");

  const int64_t slots = held_slots + computed.num_tokens + num_new_tokens;
  const int64_t needed = (slots + num_lookahead_tokens + block_size_ - 1) / block_size_;
  const int64_t num_hit = static_cast<int64_t>(computed.blocks.size());
  const int64_t num_new_blocks = std::max<int64_t>(0, needed - held_blocks - num_hit);
  // Hit blocks sitting on the free list stop being free once touched.
  int64_t hit_from_free = 0;
  for (BlockId b : computed.blocks) hit_from_free += pool_.ref_count(b) == 0 ? 1 : 0;
  if (num_new_blocks + hit_from_free > pool_.num_free()) return false;

  RequestBlocks& req = requests_[id];
  pool_.touch(computed.blocks);
  req.blocks.insert(req.blocks.end(), computed.blocks.begin(), computed.blocks.end());
  req.hashes.insert(req.hashes.end(), computed.hashes.begin(), computed.hashes.end());
  Expected<std::vector<BlockId>> fresh = pool_.allocate(static_cast<int32_t>(num_new_blocks));
  KCHECK(fresh.ok(), "{}", fresh.error().message);
  req.blocks.insert(req.blocks.end(), fresh->begin(), fresh->end());
  req.num_slots = slots;
  queries_ += computed.num_queried_tokens;
  hits_ += computed.num_tokens;
  return true;
}

void KVCacheManager::cache_blocks(const RequestId& id, std::span<const int32_t> tokens,
                                  int64_t num_computed_tokens, std::span<const uint64_t> extra_keys,
                                  std::vector<BlockId>* published) {
  if (!enable_prefix_caching_) return;
  const auto it = requests_.find(id);
  KCHECK(it != requests_.end(), "caching blocks of unknown request {}", id);
  RequestBlocks& req = it->second;
  KCHECK(num_computed_tokens >= 0 && num_computed_tokens <= static_cast<int64_t>(tokens.size()) &&
             num_computed_tokens <= req.num_slots,
         "request {}: {} computed tokens of {} given, {} slots", id, num_computed_tokens,
         tokens.size(), req.num_slots);
  const size_t first = req.hashes.size();
  extend_block_hashes(tokens.first(num_computed_tokens), block_size_, extra_keys, &req.hashes);
  for (size_t i = first; i < req.hashes.size(); ++i) {
    // A false return means an identical block is already cached; this copy simply stays private.
    if (pool_.cache_full_block(req.blocks[i], req.hashes[i],
                               tokens.subspan(i * block_size_, block_size_)) &&
        published != nullptr)
      published->push_back(req.blocks[i]);
  }
}

void KVCacheManager::rollback_slots(const RequestId& id, int64_t num_slots) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  it->second.num_slots = std::min(it->second.num_slots, std::max<int64_t>(num_slots, 0));
}

void KVCacheManager::uncache(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) pool_.uncache(b);
}

void KVCacheManager::free(const RequestId& id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  // Tail blocks first: they are the least likely to be shared, so they should be evicted first.
  std::vector<BlockId>& blocks = it->second.blocks;
  std::reverse(blocks.begin(), blocks.end());
  pool_.free(blocks);
  requests_.erase(it);
}

std::span<const BlockId> KVCacheManager::block_table(const RequestId& id) const {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.blocks;
}

int64_t KVCacheManager::num_slots(const RequestId& id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.num_slots;
}

}  // namespace kestrel
