// base/task_pool.h — a few threads that run posted tasks in FIFO order: blocking work taken off
// threads that must stay responsive (the HTTP I/O threads, the engine client's output thread).
// Any thread may post; the destructor runs every task already posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class TaskPool {
 public:
  explicit TaskPool(int num_threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues `task` to run on one of the pool's threads (tasks posted by one thread start in the
  // order posted). A task must not throw.
  void post(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kestrel
