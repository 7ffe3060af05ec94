// EngineLoop (see engine_loop.h). Each iteration: take the inbox (new jobs, cancellations), submit / abort,
// run one engine step, hand token events and finished results to the jobs' channels, publish stats.
#include "server/engine_loop.h"

#include <future>

namespace dsinfer::server {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, Metrics* metrics, PdWorker* pd)
    : engine_(std::move(engine)), metrics_(metrics), pd_(pd), max_model_len_(engine_->max_model_len()) {
  engine_->set_token_callback([this](const TokenEvent& ev) { on_token(ev); });
  metrics_->set_engine_stats(engine_->stats(), 0);  // /get_load and /metrics are true before the first iteration
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() { thread_ = std::thread([this] { run(); }); }

void EngineLoop::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) {
      job->channel->push(
          {Event::Kind::kError, 0, {}, {}, 503, "server_shutting_down", "the server is shutting down", ""});
      return;
    }
    if (refusing_) {
      job->channel->push({Event::Kind::kError, 0, {}, {}, 503, "server_draining",
                          "the server is draining (shutting down after its requests in flight); retry elsewhere", ""});
      return;
    }
    if (!unavailable_.empty()) {
      job->channel->push({Event::Kind::kError, 0, {}, {}, 503, "engine_unavailable",
                          "the engine cannot serve requests: " + unavailable_, ""});
      return;
    }
    ++in_flight_;
    inbox_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void EngineLoop::cancel(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(std::move(job));
  }
  cv_.notify_one();
}

bool EngineLoop::run_on_engine(std::function<void(Engine&)> fn) {
  std::promise<void> done;
  std::future<void> ran = done.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return false;
    tasks_.push_back([&] {
      try {
        fn(*engine_);
        done.set_value();
      } catch (...) {  // to the caller (a connection thread answers 500); the engine thread lives on
        done.set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_one();
  ran.get();  // the loop runs every queued task before it exits
  return true;
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::take_inbox(std::vector<std::shared_ptr<Job>>& submits, std::vector<std::shared_ptr<Job>>& cancels,
                            std::vector<std::function<void()>>& tasks) {
  std::unique_lock<std::mutex> lk(mu_);
  // Idle: sleep until there is work (the timeout only bounds how stale the published stats get).
  if (!engine_->has_unfinished())
    cv_.wait_for(lk, std::chrono::milliseconds(500),
                 [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty(); });
  submits.swap(inbox_);
  cancels.swap(cancels_);
  tasks.swap(tasks_);
}

void EngineLoop::admit(const std::shared_ptr<Job>& job) {
  std::string err, param;
  uint64_t id = 0;
  int status = 400;
  if (job->pd_import && pd_ && !job->import_blob.empty()) {
    pd_->import_state(*engine_, job->import_blob, &job->pd);  // a failure leaves a local prefill
    std::string().swap(job->import_blob);
  }
  try {
    id = engine_->submit(job->request, &err, &param);
  } catch (const std::exception& e) {  // a bug: the request fails, the server lives on
    err = std::string("internal error: ") + e.what();
    status = 500;
  }
  if (!id) {
    --in_flight_;
    const char* type = status == 400 ? "invalid_request_error" : "internal_error";
    job->channel->push({Event::Kind::kError, 0, {}, {}, status, type, err, param});
    return;
  }
  job->id = id;
  jobs_[id] = job;
  job->channel->push({Event::Kind::kStarted, id, {}, {}, 0, "", "", ""});
}

void EngineLoop::on_token(const TokenEvent& ev) {
  auto it = jobs_.find(ev.request_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  if (!ev.token_ids.empty()) {
    const auto now = std::chrono::steady_clock::now();
    uint64_t later = ev.token_ids.size();
    if (!job.first_token_seen) {
      job.first_token_seen = true;
      metrics_->observe_ttft(seconds(now - job.arrival));
      --later;
    }
    if (later > 0) metrics_->observe_inter_token(seconds(now - job.last_token), later);
    job.last_token = now;
  }
  Event e;
  e.kind = Event::Kind::kToken;
  e.token = ev;
  job.channel->push(std::move(e));
}

void EngineLoop::deliver_finished() {
  for (RequestResult& r : engine_->take_finished()) {
    auto it = jobs_.find(r.id);
    if (it == jobs_.end()) continue;
    metrics_->count_finished(r, seconds(std::chrono::steady_clock::now() - it->second->arrival));
    if (it->second->export_state && pd_) it->second->kv_transfer_params = pd_->export_state(*engine_, r);
    Event e;
    e.kind = Event::Kind::kDone;
    e.result = std::move(r);
    --in_flight_;  // before the answer goes out: a client that reads /get_load after it sees the request gone
    it->second->channel->push(std::move(e));
    jobs_.erase(it);
  }
}

std::string EngineLoop::unavailable_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return unavailable_;
}

void EngineLoop::fail_all(const std::string& message) {
  // A failed model step: every request in flight ends with the error. Usually the engine stays usable; when the
  // runner cannot run any more (a rank failed), they end with 503 and so does every later request.
  const std::string down = engine_->unavailable_reason();
  if (!down.empty()) {
    std::lock_guard<std::mutex> lk(mu_);
    unavailable_ = down;
  }
  const int status = down.empty() ? 500 : 503;
  const char* type = down.empty() ? "internal_error" : "engine_unavailable";
  for (auto& [id, job] : jobs_) {
    std::string ignored;
    engine_->abort(id, &ignored);
    job->channel->push({Event::Kind::kError, id, {}, {}, status, type, "model step failed: " + message, ""});
    --in_flight_;
  }
  jobs_.clear();
  (void)engine_->take_finished();
}

void EngineLoop::run() {
  std::vector<std::shared_ptr<Job>> submits, cancels;
  std::vector<std::function<void()>> tasks;
  while (true) {
    submits.clear();
    cancels.clear();
    tasks.clear();
    take_inbox(submits, cancels, tasks);
    for (const auto& task : tasks) task();  // between steps, before this iteration's admissions
    bool stopping;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping = stopping_;
    }
    for (const auto& job : submits) admit(job);
    for (const auto& job : cancels)
      if (job->id && jobs_.count(job->id)) {
        std::string ignored;
        engine_->abort(job->id, &ignored);
      }
    if (stopping)
      for (auto& [id, job] : jobs_) {
        std::string ignored;
        engine_->abort(id, &ignored);
      }
    // A job cancelled before it was admitted is aborted right after admission above (same iteration).
    if (engine_->has_unfinished()) {
      std::string err;
      bool ok = false;
      try {
        ok = engine_->step(&err);
      } catch (const std::exception& e) {
        err = std::string("internal error: ") + e.what();
      }
      if (!ok) fail_all(err);
    }
    // Stats first: a client that reads /metrics after its response sees the step that finished it.
    metrics_->set_engine_stats(engine_->stats(), 0);
    deliver_finished();
    if (stopping && jobs_.empty()) {
      std::lock_guard<std::mutex> lk(mu_);
      if (inbox_.empty() && tasks_.empty()) return;
    }
  }
}

}  // namespace dsinfer::server
