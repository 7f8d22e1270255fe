// backend/workspace.h — grow-only scratch buffers in the backend's memory, one per slot id the
// caller chooses (the model's layers name theirs): after the largest batch has been seen, a
// forward pass allocates nothing. Owned by the backend; only the thread running the forward
// pass touches it.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_vector.h"

namespace kestrel {

class Workspace {
 public:
  // At least n floats for `slot`, 64-byte aligned; valid until the next get() of that slot with
  // a larger n.
  float* get(int slot, int64_t n) {
    if (slot >= int(bufs_.size())) bufs_.resize(size_t(slot) + 1);
    AlignedVector<float>& b = bufs_[size_t(slot)];
    if (int64_t(b.size()) < n) b.resize(size_t(n));
    return b.data();
  }
  size_t bytes() const {
    size_t n = 0;
    for (const AlignedVector<float>& b : bufs_) n += b.size() * sizeof(float);
    return n;
  }

 private:
  std::vector<AlignedVector<float>> bufs_;
};

}  // namespace kestrel
