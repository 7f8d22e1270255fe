// backend/cpu/thread_scratch.h — the CPU kernels' scratch, one arena per thread of the pool.
//
// Owned by the CPU backend beside its ThreadPool, sized to it, and handed down to the kernels.
// Arena i belongs to participant i of ThreadPool::parallel_for (0: the caller): only the thread
// running participant i's chunks touches it, and arena 0 also the caller between jobs (the pool
// runs one job at a time, so no index is ever in use twice). A kernel may fill an object of the
// caller's arena before a job and let the job's chunks read it. Objects live as long as the
// backend and keep their buffers' capacity: once the largest call has been seen, kernels
// allocate nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "base/status.h"

namespace kestrel::cpu {

class ScratchArena {
 public:
  // The arena's object of type T, value-initialized on first use. Each kernel names its scratch
  // by a type of its own (usually a struct of grow-only vectors), so kernels that run inside one
  // another never share a buffer.
  template <class T>
  T& get() {
    const size_t id = type_id<T>();
    if (objects_.size() <= id) objects_.resize(id + 1);
    std::shared_ptr<void>& o = objects_[id];  // type-erased, deletes as a T
    if (o == nullptr) o = std::make_shared<T>();
    return *static_cast<T*>(o.get());
  }

 private:
  // A dense index per type, for the vector above.
  static inline std::atomic<size_t> next_id_{0};
  template <class T>
  static size_t type_id() {
    static const size_t id = next_id_.fetch_add(1);
    return id;
  }

  std::vector<std::shared_ptr<void>> objects_;
};

// One arena per participant of a pool of `threads`.
class ThreadScratch {
 public:
  explicit ThreadScratch(int threads) : arenas_(size_t(threads)) {}
  ScratchArena& operator[](int thread) {
    KCHECK(thread >= 0 && size_t(thread) < arenas_.size(), "thread {} of a pool of {}", thread,
           arenas_.size());
    return arenas_[size_t(thread)];
  }

 private:
  std::vector<ScratchArena> arenas_;
};

}  // namespace kestrel::cpu
