// Per-op CUDA-event timing of the CUDA forward for `dsinfer bench` (RunnerDiagnostics::set_timing / op_times):
// when enabled, every named op of a step is bracketed by a pair of events (one pair per (name, layer), reused
// across steps). Disabled, mark() does nothing. Plain header, no CUDA types.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

class OpTimer {
 public:
  OpTimer() = default;
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  ~OpTimer();

  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  // Forgets the previous step's ops.
  void begin_step() { order_.clear(); }
  // Records the begin or end event of op (name, layer) on `stream`.
  Status mark(const char* name, int64_t layer, bool begin, void* stream);
  // Waits for `stream`, then the time of every op of the step, in execution order.
  Result<std::vector<runner::RunnerDiagnostics::OpTime>> times(void* stream) const;

 private:
  bool enabled_ = false;
  std::map<std::pair<std::string, int64_t>, std::pair<void*, void*>> events_;  // cudaEvent_t begin / end
  std::vector<std::pair<std::string, int64_t>> order_;
};

}  // namespace dsinfer::backends
