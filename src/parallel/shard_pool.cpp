// ShardPool (see shard_pool.h): a generation counter under one mutex; workers wait for a new generation, run the
// job outside the lock, and the last one to finish wakes run().
#include "parallel/shard_pool.h"

namespace dsinfer::parallel {

ShardPool::~ShardPool() { stop(); }

Status ShardPool::start(int32_t n, Job setup) {
  if (!threads_.empty()) return Status::error("ShardPool::start: already started");
  if (n < 1) return Status::errorf("ShardPool::start: {} workers", n);
  {
    std::lock_guard<std::mutex> lk(mu_);
    results_.assign(size_t(n), Status::ok());
    pending_ = n;
    ++generation_;  // the setup counts as the first job
  }
  for (int32_t r = 0; r < n; ++r) threads_.emplace_back(&ShardPool::worker, this, r, setup);
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
  for (const Status& s : results_)
    if (!s) return s;
  return Status::ok();
}

Status ShardPool::run(const Job& job) {
  if (threads_.empty()) return Status::error("ShardPool::run: not started");
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &job;
  pending_ = int32_t(threads_.size());
  for (Status& s : results_) s = Status::ok();
  ++generation_;
  work_cv_.notify_all();
  done_cv_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  for (const Status& s : results_)
    if (!s) return s;
  return Status::ok();
}

void ShardPool::worker(int32_t rank, Job setup) {
  Status st = setup ? setup(rank) : Status::ok();
  std::unique_lock<std::mutex> lk(mu_);
  uint64_t seen = generation_;
  results_[size_t(rank)] = std::move(st);
  if (--pending_ == 0) done_cv_.notify_all();
  for (;;) {
    work_cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const Job* job = job_;
    lk.unlock();
    Status s = (*job)(rank);
    lk.lock();
    results_[size_t(rank)] = std::move(s);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void ShardPool::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace dsinfer::parallel
