#include "kv/kv_cache_manager.h"

#include <algorithm>

namespace kestrel {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               std::vector<KVCacheSpec> groups, StateCheckpointConfig state)
    : pool_(num_blocks),
      block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      state_(state),
      checkpoints_(state.first_slot, state.present ? state.num_slots : 0) {
  KCHECK(block_size > 0, "block size {}", block_size);
  if (groups.empty()) groups.push_back(KVCacheSpec{});
  groups_.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    KVCacheSpec spec = groups[g];
    spec.block_size = block_size;
    KCHECK(spec.kind != KVCacheKind::kSlidingWindow || spec.sliding_window > 0,
           "KV group {}: sliding window {}", g, spec.sliding_window);
    groups_.emplace_back(spec, int32_t(g), pool_);
  }
}

ComputedBlocks KVCacheManager::get_computed_blocks(std::span<const int32_t> tokens,
                                                   std::span<const BlockHash> block_hashes) {
  ComputedBlocks out;
  out.blocks.resize(groups_.size());
  if (!enable_prefix_caching_ || tokens.empty()) return out;
  // Only blocks that end before the last token can be reused.
  const size_t usable = (tokens.size() - 1) / size_t(block_size_);
  KCHECK(block_hashes.size() >= usable, "{} block hashes for {} tokens", block_hashes.size(),
         tokens.size());
  const std::span<const BlockHash> hashes = block_hashes.first(usable);
  // Each group's hit can only shorten the others': shrink to the longest every group takes, and
  // with linear-attention layers to the longest whose end has a state checkpoint.
  size_t len = hashes.size();
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      out.blocks[g] = groups_[g].find_hit(hashes, tokens, len);
      if (out.blocks[g].size() < len) {
        len = out.blocks[g].size();
        changed = true;
      }
    }
    if (state_.present) {
      size_t with_state = len;
      while (with_state > 0 && !checkpoints_.has(hashes[with_state - 1])) --with_state;
      if (with_state < len) {
        len = with_state;
        changed = true;
      }
    }
  }
  for (std::vector<BlockId>& b : out.blocks) b.resize(len);
  if (state_.present && len > 0) out.state_checkpoint = *checkpoints_.find(hashes[len - 1]);
  out.num_blocks = int64_t(len);
  out.num_tokens = static_cast<int64_t>(len) * block_size_;
  out.num_queried_tokens = static_cast<int64_t>(tokens.size());
  return out;
}

std::optional<int32_t> KVCacheManager::reserve_checkpoint(std::span<const BlockHash> block_hashes,
                                                          int64_t num_blocks) {
  if (!checkpoints_state() || num_blocks <= 0 || size_t(num_blocks) > block_hashes.size())
    return std::nullopt;
  return checkpoints_.reserve(block_hashes[size_t(num_blocks) - 1]);
}

bool KVCacheManager::allocate_slots(RequestHandle id, int64_t num_new_tokens,
                                    const ComputedBlocks& computed, int64_t num_lookahead_tokens) {
  KCHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0, "negative token count {} / {}",
         num_new_tokens, num_lookahead_tokens);
  const RequestBlocks* held = requests_.find(id);
  const int64_t held_slots = held == nullptr ? 0 : held->num_slots;
  KCHECK(computed.num_blocks == 0 || held == nullptr,
         "request {} already holds blocks; prefix hits apply to a fresh request only", id);
  const bool hit = computed.num_blocks > 0;
  KCHECK(!hit || computed.blocks.size() == groups_.size(), "computed blocks for {} groups, not {}",
         computed.blocks.size(), groups_.size());
  auto hit_of = [&](size_t g) {
    return hit ? std::span<const BlockId>(computed.blocks[g]) : std::span<const BlockId>();
  };
  // Queries of this step start at held_slots: what lies out of their windows goes first.
  for (GroupManager& g : groups_) g.remove_skipped(id, held_slots);
  const int64_t slots = held_slots + computed.num_tokens + num_new_tokens;
  const int64_t positions = slots + num_lookahead_tokens;
  int64_t needed = 0;
  for (size_t g = 0; g < groups_.size(); ++g)
    needed += groups_[g].num_blocks_needed(id, positions, hit_of(g));
  if (needed > pool_.num_free()) return false;

  RequestBlocks& req = requests_[id];
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].allocate(id, positions, hit_of(g));
  req.num_hashed += size_t(computed.num_blocks);
  req.num_slots = slots;
  queries_ += computed.num_queried_tokens;
  hits_ += computed.num_tokens;
  return true;
}

void KVCacheManager::cache_blocks(RequestHandle id, std::span<const int32_t> tokens,
                                  int64_t num_computed_tokens,
                                  std::span<const BlockHash> block_hashes,
                                  std::vector<BlockId>* published) {
  if (!enable_prefix_caching_) return;
  RequestBlocks* found = requests_.find(id);
  KCHECK(found != nullptr, "caching blocks of unknown request {}", id);
  RequestBlocks& req = *found;
  KCHECK(num_computed_tokens >= 0 && num_computed_tokens <= static_cast<int64_t>(tokens.size()) &&
             num_computed_tokens <= req.num_slots,
         "request {}: {} computed tokens of {} given, {} slots", id, num_computed_tokens,
         tokens.size(), req.num_slots);
  const size_t full = size_t(num_computed_tokens / block_size_);
  KCHECK(block_hashes.size() >= full, "request {}: {} block hashes for {} full blocks", id,
         block_hashes.size(), full);
  if (full <= req.num_hashed) return;
  for (GroupManager& g : groups_)
    g.cache(id, block_hashes.first(full), req.num_hashed, tokens, published);
  req.num_hashed = full;
}

void KVCacheManager::rollback_slots(RequestHandle id, int64_t num_slots) {
  RequestBlocks* req = requests_.find(id);
  if (req == nullptr) return;
  req->num_slots = std::min(req->num_slots, std::max<int64_t>(num_slots, 0));
}

void KVCacheManager::uncache(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) pool_.uncache(b);
}

void KVCacheManager::free(RequestHandle id) {
  if (!requests_.contains(id)) return;
  for (GroupManager& g : groups_) g.free(id);
  requests_.erase(id);
}

std::vector<std::vector<BlockId>> KVCacheManager::detach(RequestHandle id) {
  std::vector<std::vector<BlockId>> tables;
  if (!requests_.contains(id)) return tables;
  for (GroupManager& g : groups_) tables.push_back(g.detach(id));
  requests_.erase(id);
  return tables;
}

void KVCacheManager::free_detached(const std::vector<std::vector<BlockId>>& tables) {
  KCHECK(tables.size() <= groups_.size(), "{} block tables for {} groups", tables.size(),
         groups_.size());
  for (const std::vector<BlockId>& t : tables) {
    // Tail blocks first, as GroupManager::free does: they are evicted first.
    std::vector<BlockId> reversed(t.rbegin(), t.rend());
    pool_.free(reversed);
  }
}

std::span<const BlockId> KVCacheManager::block_table(RequestHandle id, size_t group) const {
  return group < groups_.size() ? groups_[group].table(id) : std::span<const BlockId>();
}

int64_t KVCacheManager::num_held_blocks(RequestHandle id, size_t group) const {
  return group < groups_.size() ? groups_[group].num_held(id) : 0;
}

int64_t KVCacheManager::num_slots(RequestHandle id) const {
  const RequestBlocks* req = requests_.find(id);
  return req == nullptr ? 0 : req->num_slots;
}

}  // namespace kestrel
