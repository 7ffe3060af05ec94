// StepPhases (see step_phases.h).
#include "engine/step_phases.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "core/env_switch.h"

namespace dsinfer::engine {

StepPhases::StepPhases() : on_(env_switch("DSINFER_STEP_PHASES", {"0", "1"}) == "1") {}

StepPhases::~StepPhases() {
  const size_t steps = samples_[0].size();
  if (!on_ || steps == 0) return;
  static constexpr const char* kNames[kCount] = {"between steps", "schedule", "launch (runner)", "spec round",
                                                 "sample", "detokenize", "update", "draft", "apply updates"};
  std::string line;
  for (int p = 0; p < kCount; ++p) {
    std::vector<float>& v = samples_[size_t(p)];
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(steps);
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(steps / 2), v.end());
    line += fmt::format("{}{} {:.1f} / {:.1f}", p ? ", " : "", kNames[p], mean, v[steps / 2]);
  }
  std::fprintf(stderr, "step phases (us a step, mean / median of %zu synchronous steps): %s\n", steps, line.c_str());
}

void StepPhases::begin_step() {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  cur_.fill(0.0);
  if (!samples_[0].empty()) cur_[kBetween] = std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void StepPhases::mark(Phase p) {
  if (!on_) return;
  const Clock::time_point now = Clock::now();
  cur_[size_t(p)] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void StepPhases::end_step() {
  if (!on_) return;  // the step's last mark set last_
  for (int p = 0; p < kCount; ++p) samples_[size_t(p)].push_back(float(cur_[size_t(p)] * 1e6));
}

}  // namespace dsinfer::engine
