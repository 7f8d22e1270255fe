// base/thread_pool.h — persistent compute workers for data-parallel kernels.
// The calling thread takes part as worker 0; a run() returns when every chunk is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  // n_threads includes the caller; 0 means hardware concurrency.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of size() threads and waits for all of them.
  void run(const std::function<void(int)>& fn);

  // Splits [0, n) into contiguous ranges, at least `grain` items each, one per thread;
  // fn(begin, end) runs on each non-empty range.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

// A process-wide pool for code without one at hand (tests, tools).
ThreadPool& default_thread_pool();

}  // namespace kestrel
