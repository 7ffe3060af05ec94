// Per-op CUDA-event timing of the CUDA forward for `dsinfer bench` (RunnerDiagnostics::set_timing / op_times):
// when enabled, every named op of a step is bracketed by a pair of events (one pair per (name, layer, occurrence in
// the step), reused across steps). A name used twice in a layer (the router's GEMM and its top-k, the compressor and
// its entries' encoding) is one op whose time is the sum of its occurrences. Disabled, mark() does nothing. Plain
// header, no CUDA types.
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
  void begin_step() {
    order_.clear();
    uses_.clear();
  }
  // Records the begin or end event of op (name, layer) on `stream`.
  Status mark(const char* name, int64_t layer, bool begin, void* stream);
  // Waits for `stream`, then the time of every op of the step (its occurrences summed), in order of first use.
  Result<std::vector<runner::RunnerDiagnostics::OpTime>> times(void* stream) const;

 private:
  using Key = std::pair<std::string, int64_t>;  // (name, layer)
  bool enabled_ = false;
  std::map<std::pair<Key, int>, std::pair<void*, void*>> events_;  // (op, occurrence) -> cudaEvent_t begin / end
  std::vector<Key> order_;                                         // ops of the step in order of first use
  std::map<Key, int> uses_;                                        // occurrences begun in the step
};

}  // namespace dsinfer::backends
