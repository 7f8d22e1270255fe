#include "base/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace kestrel {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ManyRoundsCompleteAndEveryChunkRunsOnce) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 5000; ++round) {
    pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  }
  EXPECT_EQ(total.load(), 5000 * 100);
}

// A parallel_for inside a job (a kernel calling a helper that parallelises too) runs serially on
// the calling thread instead of replacing the job the other workers are still reading.
TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> hits(64 * 16);
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        pool.parallel_for(16, 1, [&](int64_t ib, int64_t ie) {
          for (int64_t j = ib; j < ie; ++j) hits[size_t(i * 16 + j)].fetch_add(1);
        });
    });
    for (size_t k = 0; k < hits.size(); ++k) ASSERT_EQ(hits[k].load(), 1) << round << " " << k;
  }
}

// Calls from two threads take turns: each job sees only its own fn and range.
TEST(ThreadPool, ConcurrentCallersTakeTurns) {
  ThreadPool pool(3);
  constexpr int kRounds = 100;
  auto caller = [&pool](int64_t n, int64_t* out) {
    for (int round = 0; round < kRounds; ++round) {
      std::atomic<int64_t> sum{0};
      pool.parallel_for(n, 64, [&](int64_t b, int64_t e) {
        int64_t local = 0;
        for (int64_t i = b; i < e; ++i) local += i;
        // Long enough chunks that the two callers' jobs overlap in time.
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        sum.fetch_add(local);
      });
      *out += sum.load() == n * (n - 1) / 2 ? 1 : 0;
    }
  };
  int64_t good_a = 0, good_b = 0;
  std::thread a(caller, 100003, &good_a);
  std::thread b(caller, 65001, &good_b);
  a.join();
  b.join();
  EXPECT_EQ(good_a, kRounds);
  EXPECT_EQ(good_b, kRounds);
}

// More threads than cores: rounds must still complete (late workers' chunks are taken by
// others, and a worker waking after its job closed must not touch it).
TEST(ThreadPool, OversubscribedPoolsMakeProgress) {
  std::vector<std::thread> others;
  std::atomic<int64_t> total{0};
  for (int p = 0; p < 3; ++p) {
    others.emplace_back([&] {
      ThreadPool pool(4);
      for (int round = 0; round < 300; ++round) {
        std::vector<int64_t> local(64, 0);
        pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) local[i] += 1;
        });
        for (int64_t v : local) total.fetch_add(v);
      }
    });
  }
  for (auto& t : others) t.join();
  EXPECT_EQ(total.load(), 3 * 300 * 64);
}

TEST(ThreadPool, GrainLimitsChunks) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  std::atomic<int64_t> smallest{1 << 30};
  pool.parallel_for(10, 8, [&](int64_t b, int64_t e) {
    calls.fetch_add(1);
    int64_t cur = smallest.load();
    while (e - b < cur && !smallest.compare_exchange_weak(cur, e - b)) {
    }
  });
  EXPECT_EQ(calls.load(), 2);
  EXPECT_GE(smallest.load(), 5);
}

// The participant index: in range, the caller's 0, one OS thread per index, never two chunks
// at once under one index (also for concurrent callers and serial calls), and a nested call runs
// under its thread's index.
TEST(ThreadPool, ParticipantIndicesAreExclusive) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> busy(3);
  std::mutex mu;
  std::vector<std::set<std::thread::id>> threads_of(3);
  std::atomic<int> bad{0};
  auto enter = [&](int thread) {
    if (thread < 0 || thread >= 3 || busy[size_t(thread)].fetch_add(1) != 0) ++bad;
    std::lock_guard<std::mutex> lock(mu);
    threads_of[size_t(thread)].insert(std::this_thread::get_id());
  };
  auto leave = [&](int thread) { busy[size_t(thread)].fetch_sub(1); };
  auto caller = [&](int64_t n) {
    for (int round = 0; round < 100; ++round) {
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int thread) {
        enter(thread);
        std::this_thread::sleep_for(std::chrono::microseconds(20 * (e - b)));
        pool.parallel_for(4, 1, [&](int64_t, int64_t, int inner) {
          if (inner != thread) ++bad;
        });
        leave(thread);
      });
    }
  };
  std::thread a(caller, 24), b(caller, 1);  // b's calls run serially, as index 0
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(threads_of[1].size(), 1u);
  EXPECT_EQ(threads_of[2].size(), 1u);
  int main_index = -1;
  pool.parallel_for(1, 1, [&](int64_t, int64_t, int thread) { main_index = thread; });
  EXPECT_EQ(main_index, 0);
}

}  // namespace
// The CPUs the calling thread may run on.
std::set<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  pthread_getaffinity_np(pthread_self(), sizeof(set), &set);
  std::set<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.insert(c);
  return cpus;
}

// With pin, every thread that runs a chunk (the caller included) is bound to one CPU, and
// different threads to different CPUs while there are enough. Runs on its own thread, so the
// test binary's main thread stays free.
TEST(ThreadPool, PinnedThreadsRunOnOneCpuEach) {
  const size_t allowed = thread_cpus().size();
  std::mutex mu;
  std::vector<std::set<int>> seen;
  std::set<std::thread::id> ids;
  std::thread([&] {
    ThreadPool pool(2, /*pin=*/true);
    for (int round = 0; round < 50 && ids.size() < 2; ++round) {
      pool.parallel_for(64, 1, [&](int64_t, int64_t) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        std::lock_guard<std::mutex> lock(mu);
        if (ids.insert(std::this_thread::get_id()).second) seen.push_back(thread_cpus());
      });
    }
  }).join();
  ASSERT_FALSE(seen.empty());
  for (const std::set<int>& cpus : seen) EXPECT_EQ(cpus.size(), 1u);
  if (allowed >= 2 && seen.size() == 2) {
    EXPECT_NE(*seen[0].begin(), *seen[1].begin());
  }
  // Unpinned pools leave affinity alone.
  std::set<int> unpinned;
  std::thread([&] {
    ThreadPool pool(2);
    pool.parallel_for(1, 1, [&](int64_t, int64_t) { unpinned = thread_cpus(); });
  }).join();
  EXPECT_EQ(unpinned.size(), allowed);
}

}  // namespace kestrel
