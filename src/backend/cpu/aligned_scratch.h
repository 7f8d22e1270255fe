// backend/cpu/aligned_scratch.h — a cache-line-aligned region of a grow-only per-thread buffer,
// for kernels that keep their scratch across calls (no allocation once the largest size is seen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kestrel::cpu {

constexpr size_t kCacheLineBytes = 64;

// The first 64-byte-aligned element of buf, with buf grown (never shrunk) so that `count`
// elements fit from there. sizeof(T) must divide 64.
template <class T>
T* cache_aligned(std::vector<T>& buf, size_t count) {
  static_assert(kCacheLineBytes % sizeof(T) == 0);
  const size_t slack = kCacheLineBytes / sizeof(T);
  if (buf.size() < count + slack) buf.resize(count + slack);
  const size_t misalign = reinterpret_cast<uintptr_t>(buf.data()) % kCacheLineBytes;
  return buf.data() + (kCacheLineBytes - misalign) % kCacheLineBytes / sizeof(T);
}

}  // namespace kestrel::cpu
