#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
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

}  // namespace
}  // namespace kestrel
