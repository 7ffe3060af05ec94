// ShardPool (see shard_pool.h): a generation counter under one mutex; workers wait for a new generation, run the
// job outside the lock, and the last one to finish wakes run(). The first failure of a run is reported through
// on_failure as soon as it happens (outside the lock), so peers blocked in a collective can be released.
#include "parallel/shard_pool.h"

#include <exception>
#include <new>
#include <string>

namespace dsinfer::parallel {

ShardPool::~ShardPool() { stop(); }

Status ShardPool::call(const Job& job, int32_t rank) {
  Status s = Status::ok();
  try {
    s = job(rank);
  } catch (const std::bad_alloc&) {
    s = Status::error("out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    s = Status::errorf("exception: {}", e.what());
  } catch (...) {
    s = Status::error("unknown exception");
  }
  if (s.is_ok()) return s;
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!reported_) {
      reported_ = true;
      first_ = s;
      first = true;
    }
  }
  if (first && on_failure_) on_failure_(rank, s);
  return s;
}

Status ShardPool::first_failure() {
  if (reported_) return first_;
  for (const Status& s : results_)
    if (!s) return s;
  return Status::ok();
}

Status ShardPool::start(int32_t n, Job setup) {
  if (!threads_.empty()) return Status::error("ShardPool::start: already started");
  if (n < 1) return Status::errorf("ShardPool::start: {} workers", n);
  {
    std::lock_guard<std::mutex> lk(mu_);
    results_.assign(size_t(n), Status::ok());
    pending_ = n;
    reported_ = false;
    ++generation_;  // the setup counts as the first job
  }
  for (int32_t r = 0; r < n; ++r) threads_.emplace_back(&ShardPool::worker, this, r, setup);
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
  return first_failure();
}

Status ShardPool::run(const Job& job) {
  if (threads_.empty()) return Status::error("ShardPool::run: not started");
  std::unique_lock<std::mutex> lk(mu_);
  job_ = &job;
  pending_ = int32_t(threads_.size());
  reported_ = false;
  for (Status& s : results_) s = Status::ok();
  ++generation_;
  work_cv_.notify_all();
  if (!done_cv_.wait_for(lk, deadline_, [&] { return pending_ == 0; })) {
    // A rank is stuck (a collective whose peer died, a hung device): report it, then wait for the ranks to
    // return, which the hook's abort makes them do.
    const bool report = !reported_;
    const Status why = Status::errorf("a step did not finish within {} ms on every rank (deadline)", deadline_.count());
    if (report) {
      reported_ = true;
      first_ = why;
    }
    lk.unlock();
    if (report && on_failure_) on_failure_(-1, why);
    lk.lock();
    done_cv_.wait(lk, [&] { return pending_ == 0; });
  }
  job_ = nullptr;
  return first_failure();
}

void ShardPool::worker(int32_t rank, Job setup) {
  Status st = setup ? call(setup, rank) : Status::ok();
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
    Status s = call(*job, rank);
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
