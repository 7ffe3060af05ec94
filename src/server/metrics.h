// Server metrics in the Prometheus text format (GET /metrics): HTTP requests by endpoint and status, prompt /
// generation tokens, finished requests by finish reason, TTFT / inter-token / end-to-end latency histograms,
// and the engine's load (running / waiting requests, state-cache usage, preemptions). Thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.h"

namespace dsinfer::server {

struct Histogram {
  std::vector<double> bounds;     // upper bounds, ascending (+Inf implied)
  std::vector<uint64_t> counts;   // per bucket (not cumulative), bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double x, uint64_t times = 1);
};

class Metrics {
 public:
  Metrics();
  void count_http(const std::string& endpoint, int status);
  void count_finished(const RequestResult& r, double e2e_s);  // tokens, finish reasons, e2e latency
  void observe_ttft(double s);
  void observe_inter_token(double s, uint64_t tokens);
  void set_engine_stats(const EngineStats& st, int32_t queued_in_server);
  std::string render(bool draining = false) const;  // draining: the server refuses new requests (graceful drain)
  // For tests and overload decisions.
  EngineStats engine_stats() const;
  uint64_t http_count(const std::string& endpoint, int status) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> finished_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, itl_, e2e_;
  EngineStats engine_;
  int32_t queued_ = 0;
};

}  // namespace dsinfer::server
