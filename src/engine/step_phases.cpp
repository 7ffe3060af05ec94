// StepPhases (see step_phases.h).
#include "engine/step_phases.h"

#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "core/env_switch.h"

namespace dsinfer::engine {

StepPhases::StepPhases() : on_(env_switch("DSINFER_STEP_PHASES", {"0", "1"}) == "1") {}

StepPhases::~StepPhases() {
  if (!on_ || steps_ == 0) return;
  static constexpr const char* kNames[kCount] = {"between steps", "schedule", "launch (runner)", "spec round",
                                                 "sample", "detokenize", "update", "draft", "apply updates"};
  std::string line;
  for (int p = 0; p < kCount; ++p)
    line += fmt::format("{}{} {:.1f}", p ? ", " : "", kNames[p], s_[size_t(p)] * 1e6 / double(steps_));
  std::fprintf(stderr, "step phases (us a step, mean of %lld synchronous steps): %s\n",
               static_cast<long long>(steps_), line.c_str());
}

void StepPhases::begin_step() {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  if (steps_ > 0) s_[kBetween] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void StepPhases::mark(Phase p) {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  s_[size_t(p)] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void StepPhases::end_step() {
  if (on_) ++steps_;  // the step's last mark set last_
}

}  // namespace dsinfer::engine
