// StepQueue (see step_queue.h).
#include "parallel/step_queue.h"

namespace dsinfer::parallel {

StepQueue::~StepQueue() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepQueue::submit(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { worker(); });
  }
  work_cv_.notify_one();
}

bool StepQueue::drain(std::chrono::milliseconds deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_for(lk, deadline, [&] { return jobs_.empty() && !running_; });
}

int64_t StepQueue::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(jobs_.size()) + (running_ ? 1 : 0);
}

void StepQueue::worker() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = true;
    lk.unlock();
    try {
      job();
    } catch (...) {  // a job reports its own result; an escaped exception must not end the process
    }
    lk.lock();
    running_ = false;
    if (jobs_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace dsinfer::parallel
