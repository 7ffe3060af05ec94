// StepQueue: one worker thread that runs jobs in the order they were submitted, for a runner whose asynchronous
// steps (ModelRunner::begin_sampled_step / launch_sample_rows / wait_sample_rows) run on the host: the caller
// queues step t+1 and its sampling and returns at once, so the engine does step t's bookkeeping while the ranks
// compute (docs/multi_gpu.md "Asynchronous steps at N > 1"). A job reports its own result (a promise); the queue
// only orders them. drain() waits, with a deadline, until every queued job has run (before any call that reads or
// writes what the jobs use). Host code; no CUDA.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dsinfer::parallel {

class StepQueue {
 public:
  using Job = std::function<void()>;
  StepQueue() = default;
  StepQueue(const StepQueue&) = delete;
  StepQueue& operator=(const StepQueue&) = delete;
  ~StepQueue();  // runs the jobs still queued, then stops the thread

  // Queues job (the thread starts with the first). A job must not throw: an exception is caught and dropped.
  void submit(Job job);
  // Whether every job submitted so far has run by the deadline.
  bool drain(std::chrono::milliseconds deadline);
  // Jobs queued or running.
  int64_t pending() const;

 private:
  void worker();

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Job> jobs_;
  bool running_ = false;  // a job is being run (outside mu_)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dsinfer::parallel
