// model/kv_storage.h — the memory of a paged KV cache: one allocation for every block of the
// pool, laid out as a KVCacheLayout says (kv/kv_cache_spec.h). Each block holds
// layers_per_block storage slots; a model layer reads slot place(layer).index of the blocks in
// its group's table. Owned by whoever runs the model (the model runner, the CLI). The thread
// running forward passes writes the bytes; under prefill/decode disaggregation (kvx/) a
// transfer thread also reads a producer's finished blocks and writes a consumer's blocks that
// no step schedules until the transfer is done — never a block a forward pass touches.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "kv/kv_cache_spec.h"
#include "kv/kv_memory.h"
#include "tensor/tensor.h"

namespace kestrel {

// Linear-attention layers' states, apart from the blocks: [state slots][state layers]
// [floats_per_layer] f32, so one sequence's states are contiguous. Slots [0, num_state_slots)
// belong to one running sequence at a time (the model runner assigns them; the forward pass
// reads and updates them); the num_state_checkpoints after them hold prefix-cache checkpoints
// (kv/state_checkpoints.h), copied to and from those by the runner. Under speculative decoding
// the draft snapshots follow: per running slot, the states after each token of a step but its
// last, written by the forward pass for the sequence's drafts, so the runner can roll the state
// back past rejected drafts (reserve_draft_snapshots).
//
// Attention caches: [slots][K|V][blocks, kv_heads, block_size, head_dim] (backend/ops.h's
// kv_row_index). Latent (MLA) caches keep one row per token that stands for both K and V:
// [slots][blocks, block_size, head_dim] with head_dim = kv_lora_rank + rope width and
// num_kv_heads = 1.

class KVCacheStorage {
 public:
  // Every group of `layout` must have the same per-layer shape (plan_kv_cache_layout checks);
  // `dtype` is F32, F16 or BF16. num_state_slots: sequences whose linear-attention states it
  // holds at once, num_state_checkpoints: states kept for prefix hits (both unused for models
  // without such layers).
  KVCacheStorage(KVCacheLayout layout, int64_t num_blocks, DType dtype, int32_t num_state_slots = 0,
                 int32_t num_state_checkpoints = 0);
  // The cache of model layer i.
  KVLayer layer(int i) const;
  // Layer i of a latent cache whose rows are [latent_dim | rope_dim | the rest: an indexer key].
  MlaCacheLayer mla_layer(int i, int latent_dim, int rope_dim) const;
  const KVCacheLayout& layout() const { return layout_; }
  LayerPlace place(int layer) const;
  int num_groups() const { return int(layout_.groups.size()); }
  bool latent() const { return latent_; }
  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return layout_.block_size(); }
  size_t bytes() const { return buffer_.nbytes(); }
  KVMemoryView memory() const;
  // The linear-attention state of model layer `layer` in state slot `slot`
  // (layout().state.floats_per_layer values); checkpoints are slots too.
  float* state(int layer, int32_t slot) const;
  // The same for every slot, as the recurrent ops take it (backend/ops.h).
  StateSlots state_slots(int layer) const;
  // Every linear-attention layer's state of slot `from` into slot `to`.
  void copy_state(int32_t from, int32_t to) const;
  int32_t num_state_slots() const { return num_state_slots_; }
  int32_t num_state_checkpoints() const { return num_state_checkpoints_; }
  // Adds `per_slot` draft snapshots to every running slot (once, before the first step).
  void reserve_draft_snapshots(int32_t per_slot);
  int32_t draft_snapshots_per_slot() const { return snapshots_per_slot_; }
  // Snapshot i of running slot `slot`: the state after the sequence's token at
  // end - 1 - n + i of a step whose last n tokens before its final one keep theirs.
  int32_t draft_snapshot(int32_t slot, int32_t i) const {
    return num_state_slots_ + num_state_checkpoints_ + slot * snapshots_per_slot_ + i;
  }
  // Whether `slot` is one of the checkpoint slots (after the running sequences' slots).
  bool is_checkpoint(int32_t slot) const {
    return slot >= num_state_slots_ && slot < num_state_slots_ + num_state_checkpoints_;
  }
  size_t state_bytes() const { return state_.size() * sizeof(float); }

 private:
  // Running slots, checkpoints and draft snapshots.
  int32_t num_state_entries() const;

  KVCacheLayout layout_;
  int64_t num_blocks_;
  bool latent_;
  HostBuffer buffer_;
  DType dtype_;
  int32_t num_state_slots_;
  int32_t num_state_checkpoints_;
  int32_t snapshots_per_slot_ = 0;
  mutable std::vector<float> state_;  // written through state(): the forward pass owns it
};

}  // namespace kestrel
