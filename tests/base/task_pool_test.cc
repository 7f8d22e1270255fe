// TaskPool: every posted task runs once, a single thread keeps posting order, tasks posted from
// many threads all run, and destruction drains the queue.
#include "base/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kestrel {
namespace {

TEST(TaskPool, OneThreadRunsTasksInPostingOrder) {
  std::vector<int> seen;
  {
    TaskPool pool(1);
    for (int i = 0; i < 1000; ++i) pool.post([&seen, i] { seen.push_back(i); });
  }  // the destructor drains
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[size_t(i)], i);
}

TEST(TaskPool, TasksFromManyThreadsAllRunOnce) {
  std::atomic<int64_t> sum{0};
  {
    TaskPool pool(3);
    std::vector<std::thread> posters;
    for (int t = 0; t < 4; ++t)
      posters.emplace_back([&pool, &sum] {
        for (int i = 1; i <= 500; ++i) pool.post([&sum, i] { sum.fetch_add(i); });
      });
    for (std::thread& p : posters) p.join();
  }
  EXPECT_EQ(sum.load(), 4 * 500 * 501 / 2);
}

TEST(TaskPool, SlowTaskDoesNotHoldBackTheOthers) {
  TaskPool pool(2);
  std::atomic<bool> release{false}, quick{false};
  pool.post([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  pool.post([&] { quick = true; });
  for (int i = 0; i < 5000 && !quick.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(quick.load());
  release = true;
}

}  // namespace
}  // namespace kestrel
