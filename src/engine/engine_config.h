// EngineOptions (the public options: one definition of each default, include/dsinfer/engine.h) -> the
// configuration of every part the engine builds, checked and resolved here once and passed down: the runner's
// RunnerOptions, the state cache's StateCacheConfig (its budget included), the scheduler's SchedulerConfig, the
// SpeculativeConfig, the tokenizer file and max_model_len. Prefix caching resolves its own three options
// (engine/prefix_setup.h). Nothing below the engine reads EngineOptions field by field.
#pragma once
#include <cstdint>
#include <string>

#include "cache/state_layout.h"
#include "core/status.h"
#include "dsinfer/engine.h"
#include "io/config.h"
#include "runner/model_runner.h"
#include "scheduler/scheduler.h"
#include "speculative/speculative_config.h"

namespace dsinfer::engine {

struct EngineConfig {
  int64_t max_model_len = 0;
  std::string tokenizer_path;  // "" = the model has none
  cache::StateCacheConfig cache;
  scheduler::SchedulerConfig scheduler;
  speculative::SpeculativeConfig speculative;
  bool device_sampling = true;   // sampling "device": where the runner can (Engine::create decides with the runner)
  bool async_scheduling = true;  // "on": where the step allows it (Engine::choose_step_mode)
  bool graph_warmup = true;      // "on": the runner's graphs captured in Engine::create (engine/graph_warmup.h)
};

// What the runner is built from, before any weight is loaded; fails on any option that needs no model to be
// checked (names, counts, ranges), naming the option.
Result<runner::RunnerOptions> resolve_runner_options(const EngineOptions& o);

// The rest, against the loaded model: `mc` its config, `kv_elem_bytes` the runner's state element size.
Result<EngineConfig> resolve_engine_config(const EngineOptions& o, const io::ModelConfig& mc, int32_t kv_elem_bytes);

}  // namespace dsinfer::engine
