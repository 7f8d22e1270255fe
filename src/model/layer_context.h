// model/layer_context.h — what every layer of a forward pass shares: the backend, the batch's
// attention view, RoPE, activation precision, and grow-only scratch buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "base/aligned_vector.h"
#include "model/causal_lm.h"

namespace kestrel {

// Scratch slots. One forward runs one layer at a time, so layers share buffers; a component
// uses only its own slots, including while it calls another (the MoE block runs dense MLPs).
enum ScratchSlot : int {
  kSlotAttnQ,
  kSlotAttnK,
  kSlotAttnV,
  kSlotAttnOut,
  kSlotMlaQa,
  kSlotMlaKvA,
  kSlotMlaLatent,
  kSlotMlaKRope,
  kSlotMlaQRope,
  kSlotMlaHeadIn,
  kSlotMlaHeadOut,
  kSlotMlaQLat,
  kSlotMlaOLat,
  kSlotMlpGate,
  kSlotMlpUp,
  kSlotMoeLogits,
  kSlotMoeWeights,
  kSlotMoeIn,
  kSlotMoeOut,
  kSlotMoePairs,
  kSlotMoeShared,
  kNumScratchSlots,
};

// Grow-only f32 buffers, one per slot: after the largest batch has been seen, no allocation.
class Scratch {
 public:
  float* get(ScratchSlot slot, int64_t n) {
    AlignedVector<float>& b = bufs_[slot];
    if (int64_t(b.size()) < n) b.resize(size_t(n));
    return b.data();
  }

 private:
  AlignedVector<float> bufs_[kNumScratchSlots];
};

struct LayerContext {
  Backend& be;
  DType act;  // activations are rounded to this dtype where the reference stores them
  float eps;  // RMSNorm epsilon
  int64_t num_tokens;
  const int32_t* positions;
  const AttentionBatch& attn;
  const RopeParams& rope;
  KVCacheStorage& kv;
  Scratch& scratch;

  void round(float* p, int64_t n) const { be.round_to(act, p, n); }
};

}  // namespace kestrel
