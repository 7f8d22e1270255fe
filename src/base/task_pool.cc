#include "base/task_pool.h"

#include <algorithm>
#include <utility>

namespace kestrel {

TaskPool::TaskPool(int num_threads) {
  for (int i = 0; i < std::max(num_threads, 1); ++i) threads_.emplace_back([this] { run(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TaskPool::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void TaskPool::run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      // Stopping still drains the queue: a posted task may be a client's last answer.
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kestrel
