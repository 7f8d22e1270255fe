// base/thread_pool.h — persistent compute workers for data-parallel kernels.
// The calling thread takes part; work is handed out in chunks that any participant may take, so
// a worker the OS has descheduled (more runnable threads than cores) delays nothing: the others
// finish its share.
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
  // n_threads includes the caller; 0 means hardware concurrency. With pin, thread i of the pool
  // (the caller of parallel_for is 0) is bound to the i-th CPU this process may run on, where
  // the OS allows it: no migrations between the kernels of a step. Off by default, since pools
  // that share cores (tests, several engines) must stay free to move.
  explicit ThreadPool(int n_threads = 0, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Splits [0, n) into contiguous chunks of at least `grain` items; fn(begin, end) runs once per
  // chunk on some participating thread. Returns when every chunk is done. Any thread may call
  // it: calls from different threads take turns (one job at a time), and a call made from
  // inside a job of this pool (fn calling parallel_for again) runs serially on that thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // The same, with fn(begin, end, thread) told which participant runs the chunk: thread is in
  // [0, size()), 0 for the caller, and no two chunks running at once have the same one, so it
  // can index per-thread scratch. A call from inside a job runs with its thread's own index. A
  // call that runs serially takes its turn like a job, so index 0 is never in use twice.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int thread);
  // Takes chunks of the current job until none are left, as participant `thread`.
  void work(int thread);

  // The current job. Written only while the job is closed (no worker registered).
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};

  // Bit 31: job closed to newcomers; low bits: workers registered in the job.
  static constexpr uint32_t kClosed = 1u << 31;
  std::atomic<uint32_t> state_{kClosed};

  int n_threads_;
  bool pin_ = false;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::mutex call_mu_;  // held by the one caller whose job is running
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace kestrel
