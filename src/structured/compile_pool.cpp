// CompilePool (see compile_pool.h).
#include "structured/compile_pool.h"

#include <algorithm>
#include <utility>

namespace dsinfer::structured {

int CompilePool::default_threads() {
  const int hw = int(std::thread::hardware_concurrency());
  return std::clamp(hw / 2, 2, 8);
}

CompilePool::CompilePool(int threads) : threads_(threads > 0 ? threads : default_threads()) {}

CompilePool::~CompilePool() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CompilePool::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    if (workers_.empty())
      for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }
  cv_.notify_one();
}

void CompilePool::work() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job();
    } catch (...) {  // a job reports through its promise; nothing may escape a worker thread
    }
  }
}

}  // namespace dsinfer::structured
