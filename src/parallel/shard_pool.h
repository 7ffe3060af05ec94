// ShardPool: one persistent worker thread per GPU shard (docs/multi_gpu.md). run(fn) hands fn to every worker,
// each calls fn(rank) on its own thread, and run returns when all have finished, with the first error in rank
// order. Threads start once (start) and run their setup (e.g. cudaSetDevice) before the first job; no thread is
// spawned per step. Host code, no CUDA; the ParallelRunners drive their shards through it.
// Faults (docs/multi_gpu.md "Faults"): a job that throws becomes that rank's error; the first rank to fail calls
// the on_failure hook at once (the runners abort their communicators there, so ranks blocked in a collective
// wake up), and run() returns the first failure (the root cause), not the peers' "group ended" errors. A job
// still running at the deadline triggers on_failure with a timeout naming the ranks that did not finish.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"

namespace dsinfer::parallel {

class ShardPool {
 public:
  using Job = std::function<Status(int32_t rank)>;
  using FailureHook = std::function<void(int32_t rank, const Status& cause)>;
  ShardPool() = default;
  ShardPool(const ShardPool&) = delete;
  ShardPool& operator=(const ShardPool&) = delete;
  ~ShardPool();

  // Starts n workers; each runs setup(rank) once on its thread (its error is returned by start).
  Status start(int32_t n, Job setup);
  // Runs job(rank) on every worker at once and waits for all of them; the first failing rank's error.
  Status run(const Job& job);
  int32_t size() const { return int32_t(threads_.size()); }
  // Called (on the failing worker's thread, or run()'s at the deadline) once per run for its first failure.
  void set_on_failure(FailureHook hook) { on_failure_ = std::move(hook); }
  // How long run() waits before it reports the missing ranks through on_failure (it then waits for them to
  // return, which the aborted communicators make them do).
  void set_deadline(std::chrono::milliseconds d) { deadline_ = d; }

 private:
  void worker(int32_t rank, Job setup);
  void stop();
  Status call(const Job& job, int32_t rank);  // job(rank), exceptions caught; reports the first failure
  Status first_failure();                      // under mu_: the root cause of this run, or ok

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  std::vector<Status> results_;
  const Job* job_ = nullptr;
  uint64_t generation_ = 0;  // bumped per job; a worker runs each generation once
  int32_t pending_ = 0;      // workers still running the current job
  bool stopping_ = false;
  FailureHook on_failure_;
  std::chrono::milliseconds deadline_{std::chrono::minutes(10)};
  bool reported_ = false;        // this run's first failure went to on_failure
  Status first_ = Status::ok();  // and was this
};

}  // namespace dsinfer::parallel
