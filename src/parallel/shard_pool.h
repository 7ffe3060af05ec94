// ShardPool: one persistent worker thread per GPU shard (docs/multi_gpu.md). run(fn) hands fn to every worker,
// each calls fn(rank) on its own thread, and run returns when all have finished, with the first error in rank
// order. Threads start once (start) and run their setup (e.g. cudaSetDevice) before the first job; no thread is
// spawned per step. Host code, no CUDA; the ParallelRunner drives its CudaRunner shards through it.
#pragma once
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
  ShardPool() = default;
  ShardPool(const ShardPool&) = delete;
  ShardPool& operator=(const ShardPool&) = delete;
  ~ShardPool();

  // Starts n workers; each runs setup(rank) once on its thread (its error is returned by start).
  Status start(int32_t n, Job setup);
  // Runs job(rank) on every worker at once and waits for all of them; the first failing rank's error.
  Status run(const Job& job);
  int32_t size() const { return int32_t(threads_.size()); }

 private:
  void worker(int32_t rank, Job setup);
  void stop();

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
  std::vector<Status> results_;
  const Job* job_ = nullptr;
  uint64_t generation_ = 0;  // bumped per job; a worker runs each generation once
  int32_t pending_ = 0;      // workers still running the current job
  bool stopping_ = false;
};

}  // namespace dsinfer::parallel
