// DSINFER_STEP_PHASES=1 (a measurement switch, docs/architecture.md): the host's wall time in each phase of the
// engine's synchronous steps, printed to stderr when the engine goes (the mean and the median a step: captures and
// prefills make the mean's tail), so that the device's idle gap between two steps can be put on the host code that
// makes it without a profiler attached (CUPTI's graph tracing inflates cudaGraphLaunch ~80x: bench/NOTES.md). Off:
// every call returns at once; the decisions never read it.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace dsinfer::engine {

class StepPhases {
 public:
  // In the order step_sync runs them. kBetween: from the end of one synchronous step to the start of the next (the
  // caller's loop: admission, progress, results; asynchronous steps taken in between, e.g. speculation at rest, count
  // there too, so read it on runs that stay synchronous). kRound (speculation's one-wait round) and kSample hold the
  // step's device wait; every other phase is host work the device waits for.
  enum Phase { kBetween, kSchedule, kLaunch, kRound, kSample, kDetokenize, kUpdate, kDraft, kApply, kCount };
  StepPhases();
  ~StepPhases();
  void begin_step();
  // Charges the time since the last mark (or begin_step) to `p`.
  void mark(Phase p);
  void end_step();

 private:
  using Clock = std::chrono::steady_clock;
  bool on_ = false;
  Clock::time_point last_;
  std::array<double, kCount> cur_{};                  // this step's seconds a phase
  std::array<std::vector<float>, kCount> samples_{};  // each finished step's, in us
};

}  // namespace dsinfer::engine
