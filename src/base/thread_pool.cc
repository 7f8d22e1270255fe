#include "base/thread_pool.h"

#include <pthread.h>
#include <sched.h>

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
// Chunks per thread: a few, so a late or slow thread leaves work the others can take.
constexpr int64_t kChunksPerThread = 4;

// The pool whose job this thread is running chunks of, if any, and as which participant: a
// parallel_for from inside a job must not replace the job the other participants are still
// reading, and runs with the index its thread has in that job.
thread_local const ThreadPool* t_in_job = nullptr;
thread_local int t_thread = 0;

class InJob {
 public:
  InJob(const ThreadPool* pool, int thread) : saved_(t_in_job), saved_thread_(t_thread) {
    t_in_job = pool;
    t_thread = thread;
  }
  ~InJob() {
    t_in_job = saved_;
    t_thread = saved_thread_;
  }

 private:
  const ThreadPool* saved_;
  int saved_thread_;
};

// Binds the calling thread to the index-th CPU of the process's affinity mask (wrapping
// around); does nothing where affinity cannot be read or set.
void pin_to_cpu(int index) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int count = CPU_COUNT(&allowed);
  if (count == 0) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != index % count) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    return;
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, bool pin) : pin_(pin) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i)
    workers_.emplace_back([this, i] {
      if (pin_) pin_to_cpu(i);
      worker_loop(i);
    });
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

void ThreadPool::work(int thread) {
  const InJob in_job(this, thread);
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + chunk_), thread);
  }
}

void ThreadPool::worker_loop(int thread) {
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
    // Register unless the job is already closed (its caller may have returned); a job opened
    // since the wake-up is fine to join too: its fields were written before it opened.
    uint32_t s = state_.load(std::memory_order_acquire);
    bool joined = false;
    while (!(s & kClosed)) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    work(thread);
    state_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(n, grain, [&fn](int64_t begin, int64_t end, int) { fn(begin, end); });
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (t_in_job == this) {
    fn(0, n, t_thread);
    return;
  }
  if (pin_) {
    // The caller is thread 0: bound on its first call (usually the engine's one compute thread).
    thread_local bool pinned = false;
    if (!pinned) pin_to_cpu(0);
    pinned = true;
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(max_chunks, int64_t(n_threads_) * kChunksPerThread);
  const std::lock_guard<std::mutex> turn(call_mu_);
  if (n_threads_ == 1 || chunks <= 1) {
    const InJob in_job(this, 0);
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  next_.store(0, std::memory_order_relaxed);
  state_.store(0, std::memory_order_release);  // open: workers may register
  {
    // Taking the lock orders the generation bump against a worker about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  work(0);
  // Close the job, then wait only for workers that joined it. Spin briefly, then yield: when
  // cores are oversubscribed a joined straggler needs our core.
  state_.fetch_or(kClosed, std::memory_order_acq_rel);
  for (int spin = 0; (state_.load(std::memory_order_acquire) & ~kClosed) != 0; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace kestrel
