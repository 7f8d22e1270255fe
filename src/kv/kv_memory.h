// kv/kv_memory.h — a KV cache's bytes described as plain memory, for whoever moves them without
// knowing the model: the KV transfer of prefill/decode disaggregation (kvx/) reads and writes
// blocks, head slices and linear-attention state slots through it. The storage that owns the
// memory (model/kv_storage.h) hands out the view.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kestrel {

// The storage's bytes as a KV transfer moves them: `planes` planes (K and V of each slot, or one
// per slot for a latent cache) of `num_blocks` blocks, each block `block_bytes` long and cut into
// `heads` equal head slices (one for a latent cache); and for models with linear-attention
// layers their states: `state_entries` slots of `state_layers` layers of
// `state_floats_per_layer` f32 values (null `state`: none).
struct KVMemoryView {
  uint8_t* base = nullptr;
  int64_t num_blocks = 0;
  int planes = 0;
  size_t block_bytes = 0;
  int heads = 1;
  size_t head_bytes() const { return block_bytes / size_t(heads); }
  // Where head `head` of block `block` of plane `plane` starts.
  uint8_t* at(int plane, int64_t block, int head = 0) const {
    return base + (size_t(plane) * size_t(num_blocks) + size_t(block)) * block_bytes +
           size_t(head) * head_bytes();
  }
  float* state = nullptr;
  int32_t state_entries = 0;
  int32_t state_layers = 0;
  int64_t state_floats_per_layer = 0;
  // Layer `layer`'s state in slot `slot`.
  float* state_at(int32_t slot, int32_t layer) const {
    return state + (int64_t(slot) * state_layers + layer) * state_floats_per_layer;
  }
  size_t state_bytes() const {
    return size_t(state_entries) * size_t(state_layers) * size_t(state_floats_per_layer) *
           sizeof(float);
  }
};

}  // namespace kestrel
