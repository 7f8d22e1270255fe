// kv/kv_cache_manager.h — per-request KV block tables over one BlockPool, with prefix caching:
// the coordinator of one GroupManager per KV cache group (kv/group_manager.h; full attention,
// sliding window), which all draw from the same pool. A request has one table per group; a prefix
// hit is the longest prefix every group can start from. The scheduler's use per step:
// get_computed_blocks() for a new request, allocate_slots() for the tokens it schedules,
// cache_blocks() for them in the same step (blocks are published when scheduled, before the forward
// pass writes them: within a step every K/V of a layer is written before any attention of that
// layer reads), free() on every exit (finish, abort, preemption).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/request_table.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/group_manager.h"
#include "kv/kv_cache_spec.h"
#include "kv/state_checkpoints.h"

namespace kestrel {

// The longest cached prefix of a prompt; valid until the pool is next changed.
struct ComputedBlocks {
  std::vector<std::vector<BlockId>> blocks;  // per group, null where the group needs none
  int64_t num_blocks = 0;                    // blocks of the hit (each group's table prefix)
  int64_t num_tokens = 0;                    // num_blocks * block_size
  int64_t num_queried_tokens = 0;            // tokens looked up (the request's length)
  // Models with linear-attention layers: the state checkpoint the hit resumes from (-1: none).
  int32_t state_checkpoint = -1;
};

// Models with linear-attention layers: their state checkpoints for prefix hits
// (kv/state_checkpoints.h). present without slots: no prefix hit is possible.
struct StateCheckpointConfig {
  bool present = false;
  int32_t first_slot = 0;
  int32_t num_slots = 0;
};

// A finished request's KV that a remote decoder has yet to read (PD producer): its block tables
// (one per group, detached from the manager) and, for models with linear-attention layers, the
// checkpoint slot holding its state before its prompt's last token (-1: none).
struct HeldKv {
  std::vector<std::vector<BlockId>> blocks;
  int32_t state_slot = -1;
  bool operator==(const HeldKv&) const = default;
};

class KVCacheManager {
 public:
  // One group per spec (num_layers and shapes unused here; block_size must be block_size);
  // none: one full-attention group.
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching = true,
                 std::vector<KVCacheSpec> groups = {}, StateCheckpointConfig state = {});
  KVCacheManager(const KVCacheManager&) = delete;
  KVCacheManager& operator=(const KVCacheManager&) = delete;

  int32_t block_size() const { return block_size_; }
  size_t num_groups() const { return groups_.size(); }
  const KVCacheSpec& group_spec(size_t group) const { return groups_[group].spec(); }

  // Longest prefix of full blocks of `tokens` found (and verified) in the cache — for models with
  // linear-attention layers, ending where a state checkpoint exists — given the request's
  // chained block hashes (`block_hashes`, kept on the request as its tokens grow:
  // block_hash.h's extend_block_hashes with its extra keys). The last token is never covered:
  // its forward pass must run to produce logits. The hit/query counters move only when
  // allocate_slots admits the request with it, so a request that waits for blocks and looks up
  // again each step is counted once.
  ComputedBlocks get_computed_blocks(std::span<const int32_t> tokens,
                                     std::span<const BlockHash> block_hashes);

  // Frees, in every sliding-window group, the blocks no query of the request can read any more,
  // then reserves slots for num_new_tokens more tokens of the request, and blocks for a further
  // num_lookahead_tokens positions that are not counted as its slots (a proposer writing draft
  // K/V past the scheduled tokens). `computed` (from get_computed_blocks, just before) is only
  // allowed while the request holds no blocks. Returns false, changing nothing, when the pool
  // cannot supply the blocks.
  bool allocate_slots(RequestHandle id, int64_t num_new_tokens, const ComputedBlocks& computed = {},
                      int64_t num_lookahead_tokens = 0);

  // Forgets the request's reserved slots past the first num_slots (speculative tokens that were
  // rejected, lookahead not used); its blocks stay allocated for the next allocate_slots().
  void rollback_slots(RequestHandle id, int64_t num_slots);

  // Publishes the request's blocks made full by its first num_computed_tokens tokens to the
  // prefix cache (num_computed_tokens counts the tokens of the step being scheduled too), under
  // the request's block hashes, which must cover those blocks. The blocks it publishes (not
  // those already cached elsewhere) are appended to `published` when given.
  void cache_blocks(RequestHandle id, std::span<const int32_t> tokens, int64_t num_computed_tokens,
                    std::span<const BlockHash> block_hashes,
                    std::vector<BlockId>* published = nullptr);

  // Returns all of the request's blocks; its cached ones stay hittable. Unknown ids are ignored,
  // so every exit path may call it.
  void free(RequestHandle id);
  // Takes the request's block tables (one per group) out of the manager without freeing them:
  // the blocks stay allocated — for a prefill whose KV a remote decoder has yet to read — and
  // the request id is free for reuse. Give them back with free_detached(). Empty for unknown ids.
  std::vector<std::vector<BlockId>> detach(RequestHandle id);
  void free_detached(const std::vector<std::vector<BlockId>>& tables);
  // Withdraws blocks from the prefix cache: those published when a step was scheduled whose
  // execution then failed, so their K/V was never written. Every request holding them must end
  // (they were all in that step); blocks no longer cached are skipped.
  void uncache(std::span<const BlockId> blocks);

  // Models with linear-attention layers: whether their state is checkpointed, and a checkpoint
  // slot to save the state after the request's first num_blocks blocks into (none when they
  // have one already or there are no slots); findable after commit_checkpoints(), dropped by
  // abort_checkpoints() (the step that was to write it failed).
  bool checkpoints_state() const { return state_.present && checkpoints_.num_slots() > 0; }
  std::optional<int32_t> reserve_checkpoint(std::span<const BlockHash> block_hashes,
                                            int64_t num_blocks);
  // Frees the committed checkpoint after the blocks hashed `h` (a request's superseded one).
  void release_checkpoint(const BlockHash& h) { checkpoints_.release(h); }
  void commit_checkpoints() { checkpoints_.commit(); }
  // PD disaggregation: a checkpoint slot held for one request's state in transfer (none when
  // all are in use), until put back (kv/state_checkpoints.h).
  std::optional<int32_t> take_state_slot() { return checkpoints_.take(); }
  void put_back_state_slot(int32_t slot) { checkpoints_.put_back(slot); }
  int32_t num_taken_state_slots() const { return checkpoints_.num_taken(); }
  void abort_checkpoints() { checkpoints_.abort(); }

  double usage() const { return pool_.usage(); }
  int64_t prefix_cache_queries() const { return queries_; }  // tokens looked up at admission
  int64_t prefix_cache_hits() const { return hits_; }        // of those, tokens found
  // The request's blocks of `group` in token order (null for blocks a sliding window dropped);
  // empty for unknown ids.
  std::span<const BlockId> block_table(RequestHandle id, size_t group = 0) const;
  // Blocks the request holds in `group`: the usage figure a sliding window keeps bounded.
  int64_t num_held_blocks(RequestHandle id, size_t group) const;
  // Tokens the request has slots for.
  int64_t num_slots(RequestHandle id) const;
  const BlockPool& pool() const { return pool_; }
  size_t num_requests() const { return requests_.size(); }

 private:
  struct RequestBlocks {
    // The request's first blocks that were hit or offered to the cache.
    size_t num_hashed = 0;
    int64_t num_slots = 0;
  };

  BlockPool pool_;
  int32_t block_size_;
  bool enable_prefix_caching_;
  std::vector<GroupManager> groups_;  // they refer to pool_
  StateCheckpointConfig state_;
  StateCheckpoints checkpoints_;
  RequestTable<RequestBlocks> requests_;
  int64_t queries_ = 0;
  int64_t hits_ = 0;
};

}  // namespace kestrel
