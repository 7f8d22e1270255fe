// kv/state_checkpoints.h — prefix caching for models with linear-attention layers: which state
// slots of the KV storage hold a checkpoint, i.e. every such layer's recurrent state right after
// a block boundary, keyed by the chained hash of the blocks up to it (kv/block_hash.h). A prefix
// hit can resume only where a checkpoint exists; the runner copies it into the request's own
// state slot. Checkpoints sit apart from the block grid, so the attention block size stays small
// (vLLM instead grows it until a block holds one state: 528 tokens for Qwen3.5, too coarse for
// short prompts). A checkpoint reserved while a step is scheduled is written after that step's
// forward pass, so it is found only once the step is committed. Evicted least recently used, but
// never one found since the last commit (the step being scheduled copies it into a request's
// slot). Under PD disaggregation a slot can also be taken out of the pool altogether, to hold one
// request's state for a transfer (a producer's prompt, a consumer's load) until it is put back.
// Owned by the KVCacheManager; only the engine thread touches it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace kestrel {

class StateCheckpoints {
 public:
  // Slots [first_slot, first_slot + num_slots) of the KV storage's state slots.
  StateCheckpoints(int32_t first_slot, int32_t num_slots);

  int32_t num_slots() const { return int32_t(slots_.size()); }
  // Whether the blocks hashed `h` have a committed checkpoint.
  bool has(const BlockHash& h) const;
  // The committed checkpoint after the blocks hashed `h`, marked recently used.
  std::optional<int32_t> find(const BlockHash& h);
  // A slot to save the state after the blocks hashed `h` into, taking the least recently used
  // one when all are taken; none when `h` already has one (the same prefix: the same state) or
  // there are no slots.
  std::optional<int32_t> reserve(const BlockHash& h);
  // Frees the committed checkpoint after the blocks hashed `h`, if there is one.
  void release(const BlockHash& h);
  // A slot out of the pool, evicting the least recently used checkpoint when none is free; none
  // when every slot is taken, pending or found this step. It is the caller's until put_back().
  std::optional<int32_t> take();
  void put_back(int32_t slot);
  // Slots taken and not put back.
  int32_t num_taken() const { return num_taken_; }
  // The reservations since the last commit become findable (their step ran) or are dropped
  // (it failed: nothing was written).
  void commit();
  void abort();

 private:
  struct Entry {
    BlockHash hash;
    int32_t slot;
    bool committed;
    uint64_t found_in = 0;  // the step (step_) that last found it
  };
  using Lru = std::list<Entry>;  // front: most recently used
  void erase(Lru::iterator it);
  // Frees the least recently used committed checkpoint not found this step; false: none.
  bool evict();

  Lru lru_;
  std::unordered_map<BlockHash, Lru::iterator, BlockHashHasher> by_hash_;
  std::vector<int32_t> slots_;  // all of them
  std::vector<int32_t> free_;
  std::vector<Lru::iterator> pending_;
  uint64_t step_ = 1;  // advanced by commit() and abort()
  int32_t num_taken_ = 0;
};

}  // namespace kestrel
