// The engine thread: it alone owns and steps the (single-threaded) Engine. Connection threads hand it jobs
// (a parsed request and the Channel to answer on) and cancellations through a mutex-guarded inbox and never
// wait for a step; it answers through each job's Channel, so a slow or vanished client never blocks it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dsinfer/engine.h"
#include "server/channel.h"
#include "server/metrics.h"
#include "server/pd_worker.h"

namespace dsinfer::server {

struct Job {
  Request request;
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  // P/D (server/pd_worker.h). Prefill role: export the prompt's state when the request ends; the answer's
  // kv_transfer_params (JSON), set before kDone. Decode role: the pulled state, imported just before the request is
  // submitted, and what happened (the answer's "dsinfer_pd").
  bool export_state = false;
  std::string kv_transfer_params;
  bool pd_import = false;
  std::string import_blob;
  PdRecord pd;
  // Engine-thread bookkeeping.
  uint64_t id = 0;
  bool first_token_seen = false;
  std::chrono::steady_clock::time_point last_token;
};

class EngineLoop {
 public:
  EngineLoop(std::unique_ptr<Engine> engine, Metrics* metrics, PdWorker* pd = nullptr);
  ~EngineLoop();  // stops and joins
  void start();
  // Queues a job; the answer (kStarted or kError first) arrives on job->channel.
  void submit(std::shared_ptr<Job> job);
  // The client is gone: abort the job (queued or running) and free its state.
  void cancel(std::shared_ptr<Job> job);
  // Aborts everything in flight (each job still gets its kDone), then the thread exits.
  void stop();
  // Runs fn on the engine thread between two steps (before that iteration admits new jobs) and waits for it;
  // false (fn not run) when the loop is stopping. What fn throws is rethrown here.
  bool run_on_engine(std::function<void(Engine&)> fn);
  // Jobs submitted and not yet finished (queued here or in the engine).
  int32_t in_flight() const { return in_flight_.load(); }
  // Graceful drain, in two irreversible steps: draining (readiness off: /health answers 503) and refusing (from
  // then on submit() answers 503 server_draining) while the jobs in flight run to their end; stop() still aborts
  // whatever is left.
  void begin_drain() { draining_ = true; }
  void refuse_new() {
    draining_ = true;
    refusing_ = true;
  }
  bool draining() const { return draining_.load(); }
  bool refusing() const { return refusing_.load(); }
  const Engine& engine() const { return *engine_; }  // immutable parts only (model name, tokenizer)
  int64_t max_model_len() const { return max_model_len_; }
  // "" while the engine can run; else why not (a rank of a multi-rank runner failed): new requests and /health
  // are answered 503 with it.
  std::string unavailable_reason() const;

 private:
  void run();
  void take_inbox(std::vector<std::shared_ptr<Job>>& submits, std::vector<std::shared_ptr<Job>>& cancels,
                  std::vector<std::function<void()>>& tasks);
  void admit(const std::shared_ptr<Job>& job);
  void on_token(const TokenEvent& ev);
  void deliver_finished();
  void fail_all(const std::string& message);

  std::unique_ptr<Engine> engine_;
  Metrics* metrics_;
  PdWorker* pd_ = nullptr;
  int64_t max_model_len_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Job>> inbox_, cancels_;
  std::vector<std::function<void()>> tasks_;  // run_on_engine's, under mu_
  bool stopping_ = false;
  std::string unavailable_;  // under mu_: set once, when a failed step leaves the engine unable to run
  std::atomic<int32_t> in_flight_{0};
  std::atomic<bool> draining_{false}, refusing_{false};
  std::map<uint64_t, std::shared_ptr<Job>> jobs_;  // engine thread only
};

}  // namespace dsinfer::server
