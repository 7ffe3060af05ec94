// CompilePool: a few worker threads that compile structured-output grammars (the public Engine::prepare's work) off
// the threads that step the engine or read requests. Jobs start in the order they were posted; each caller waits
// only on its own job (a future it holds), so a slow compile delays only the request it belongs to. One pool per
// public Engine, shared by `dsinfer generate` (Engine::prepare_async) and the server's connections.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsinfer::structured {

class CompilePool {
 public:
  // threads <= 0: default_threads(). The workers start with the first job.
  explicit CompilePool(int threads = 0);
  // Jobs not yet started are dropped (their promises break); running ones are waited for.
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Runs job on a worker. The job reports its own outcome (it owns a promise); exceptions it lets out are dropped.
  void post(std::function<void()> job);
  int threads() const { return threads_; }
  // Half the hardware threads, at least 2 (one huge grammar does not hold every compile) and at most 8.
  static int default_threads();

 private:
  void work();

  int threads_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // started by the first post()
};

}  // namespace dsinfer::structured
