#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kestrel {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spin this many iterations before sleeping: long enough to cover the gap between two
// kernels of one forward pass, short enough not to burn a core while idle.
constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    // Taking the lock orders the generation bump against a worker about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  fn(0);
  // Spin briefly, then yield: when cores are oversubscribed the straggler needs our core.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_parts = (n + grain - 1) / grain;
  const int parts = int(std::min<int64_t>(n_threads_, max_parts));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t) {
    if (t >= parts) return;
    const int64_t begin = n * t / parts;
    const int64_t end = n * (t + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool(0);
  return pool;
}

}  // namespace kestrel
