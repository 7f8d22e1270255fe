#include "model/kv_storage.h"

#include <algorithm>
#include <utility>

namespace kestrel {
namespace {

int64_t elements(const KVCacheLayout& l, int64_t num_blocks, bool latent) {
  KCHECK(!l.groups.empty() && l.layers_per_block > 0, "an empty KV cache layout");
  const KVCacheSpec& g = l.groups[0];
  return int64_t(l.layers_per_block) * (latent ? 1 : 2) * num_blocks * g.block_size *
         int64_t(g.num_kv_heads) * g.head_dim;
}

}  // namespace

KVCacheStorage::KVCacheStorage(KVCacheLayout layout, int64_t num_blocks, DType dtype,
                               int32_t num_state_slots, int32_t num_state_checkpoints)
    : layout_(std::move(layout)),
      num_blocks_(num_blocks),
      latent_(!layout_.groups.empty() && layout_.groups[0].kind == KVCacheKind::kMlaLatent),
      buffer_(dtype, Shape{elements(layout_, num_blocks, latent_)}),
      dtype_(dtype),
      num_state_slots_(layout_.state.num_layers > 0 ? num_state_slots : 0),
      num_state_checkpoints_(layout_.state.num_layers > 0 ? num_state_checkpoints : 0),
      state_(size_t(num_state_slots_ + num_state_checkpoints_) * size_t(layout_.state.num_layers) *
                 size_t(layout_.state.floats_per_layer),
             0.0f) {
  const KVCacheSpec& first = layout_.groups[0];
  for (const KVCacheSpec& g : layout_.groups)
    KCHECK(g.block_size == first.block_size && g.num_kv_heads == first.num_kv_heads &&
               g.head_dim == first.head_dim && (g.kind == KVCacheKind::kMlaLatent) == latent_ &&
               size_t(g.row_bytes) == dtype_bytes(dtype, g.head_dim),
           "KV cache groups of different layer shapes cannot share one storage");
}

KVMemoryView KVCacheStorage::memory() const {
  const KVCacheSpec& g = layout_.groups[0];
  KVMemoryView m;
  m.base = static_cast<uint8_t*>(const_cast<void*>(buffer_.view().data));
  m.num_blocks = num_blocks_;
  m.planes = layout_.layers_per_block * (latent_ ? 1 : 2);
  m.heads = latent_ ? 1 : g.num_kv_heads;
  m.block_bytes = dtype_bytes(dtype_, int64_t(g.block_size) * g.num_kv_heads * g.head_dim);
  if (layout_.state.num_layers > 0 && !state_.empty()) {
    m.state = state_.data();
    m.state_entries = num_state_entries();
    m.state_layers = int32_t(layout_.state.num_layers);
    m.state_floats_per_layer = layout_.state.floats_per_layer;
  }
  return m;
}

int32_t KVCacheStorage::num_state_entries() const {
  return num_state_slots_ * (1 + snapshots_per_slot_) + num_state_checkpoints_;
}

float* KVCacheStorage::state(int layer, int32_t slot) const {
  const LayerPlace p = place(layer);
  KCHECK(p.group == KVCacheLayout::kStateGroup, "layer {} has no linear-attention state", layer);
  KCHECK(slot >= 0 && slot < num_state_entries(), "state slot {} of {}", slot, num_state_entries());
  return state_.data() + (size_t(slot) * size_t(layout_.state.num_layers) + size_t(p.index)) *
                             size_t(layout_.state.floats_per_layer);
}

StateSlots KVCacheStorage::state_slots(int layer) const {
  const int32_t n = num_state_entries();
  KCHECK(n > 0, "no linear-attention state slots");
  return StateSlots{state(layer, 0),
                    int64_t(layout_.state.num_layers) * layout_.state.floats_per_layer, n};
}

void KVCacheStorage::copy_state(int32_t from, int32_t to) const {
  const int32_t n = num_state_entries();
  KCHECK(from >= 0 && from < n && to >= 0 && to < n, "state slots {} -> {} of {}", from, to, n);
  const size_t per = size_t(layout_.state.num_layers) * size_t(layout_.state.floats_per_layer);
  std::copy_n(state_.data() + size_t(from) * per, per, state_.data() + size_t(to) * per);
}

void KVCacheStorage::reserve_draft_snapshots(int32_t per_slot) {
  KCHECK(snapshots_per_slot_ == 0 && per_slot >= 0, "draft snapshots reserved twice");
  snapshots_per_slot_ = num_state_slots_ > 0 ? per_slot : 0;
  state_.resize(size_t(num_state_entries()) * size_t(layout_.state.num_layers) *
                    size_t(layout_.state.floats_per_layer),
                0.0f);
}

LayerPlace KVCacheStorage::place(int layer) const {
  KCHECK(layer >= 0 && size_t(layer) < layout_.layers.size(), "layer {} out of range", layer);
  return layout_.layers[size_t(layer)];
}

KVLayer KVCacheStorage::layer(int i) const {
  KCHECK(!latent_, "a latent (MLA) cache has no separate K and V");
  const KVCacheSpec& g = layout_.groups[0];
  const int64_t per = num_blocks_ * g.block_size * int64_t(g.num_kv_heads) * g.head_dim;
  const size_t per_bytes = dtype_bytes(dtype_, per);
  KCHECK(place(i).group >= 0, "layer {} is a linear-attention layer", i);
  const size_t slot = size_t(place(i).index);
  auto* base = static_cast<uint8_t*>(const_cast<void*>(buffer_.view().data));
  KVLayer l;
  l.k = base + 2 * slot * per_bytes;
  l.v = base + (2 * slot + 1) * per_bytes;
  l.dtype = dtype_;
  l.num_blocks = num_blocks_;
  l.block_size = g.block_size;
  l.num_kv_heads = g.num_kv_heads;
  l.head_dim = g.head_dim;
  return l;
}

MlaCacheLayer KVCacheStorage::mla_layer(int i, int latent_dim, int rope_dim) const {
  const KVCacheSpec& g = layout_.groups[0];
  KCHECK(latent_ && latent_dim > 0 && rope_dim >= 0 && latent_dim + rope_dim <= g.head_dim,
         "latent width {} and rope width {} do not fit this cache (latent {}, row width {})",
         latent_dim, rope_dim, latent_, g.head_dim);
  const size_t per_bytes = dtype_bytes(dtype_, num_blocks_ * g.block_size * int64_t(g.head_dim));
  MlaCacheLayer l;
  l.data = static_cast<uint8_t*>(const_cast<void*>(buffer_.view().data)) +
           size_t(place(i).index) * per_bytes;
  l.dtype = dtype_;
  l.num_blocks = num_blocks_;
  l.block_size = g.block_size;
  l.latent_dim = latent_dim;
  l.rope_dim = rope_dim;
  l.index_dim = g.head_dim - latent_dim - rope_dim;
  return l;
}

}  // namespace kestrel
