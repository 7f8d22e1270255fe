#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
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

TEST(ThreadPool, RunCallsEveryThreadAndManyRoundsComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 2000; ++round) {
    pool.run([&](int t) { total.fetch_add(t + 1); });
  }
  EXPECT_EQ(total.load(), 2000 * 3);
}

TEST(ThreadPool, GrainLimitsParts) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(10, 8, [&](int64_t, int64_t) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace kestrel
