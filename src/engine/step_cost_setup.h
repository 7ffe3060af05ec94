// Engine::create's step cost model for speculative decoding (speculative/step_cost.h), resolved once from
// EngineOptions::speculative_cost_model: "off" = none (every draft verified); "auto" = the cpu backend's
// proportional fallback, or on cuda the cached table of this model, GPU and numerics, profiled (perf/
// step_profile.h, a few seconds) and written to the cache when absent or stale; a PATH = that file, read when its
// key matches (or is "*": a hand-written table for any model), else profiled and written there. A cache that
// cannot be written is reported, not fatal. The table's measured one-wait round ("round" line) is dropped where
// DSINFER_SPEC_ROUND_COST=0 asks for the round's parts (and by the Speculator where its rounds are two-wait).
#pragma once
#include <string>

#include "cache/state_cache.h"
#include "dsinfer/engine.h"
#include "runner/model_runner.h"
#include "speculative/drafter.h"
#include "speculative/speculative_config.h"
#include "speculative/step_cost.h"

namespace dsinfer::engine {

// The cache folder: $DSINFER_CACHE_DIR, else $XDG_CACHE_HOME/dsinfer, else $HOME/.cache/dsinfer ("" if none).
std::string step_cost_cache_dir();

// The model for `spec` (enabled) on `runner`, whose state `sc` is bound, and `drafter` (its rounds are timed too),
// for up to the engine's max_num_seqs (capped by the slots) sequences. An empty model for "off".
Result<speculative::StepCostModel> setup_step_cost(const EngineOptions& o, const speculative::SpeculativeConfig& spec,
                                                   runner::ModelRunner& runner, speculative::Drafter& drafter,
                                                   const cache::StateCache& sc, int64_t max_model_len);

}  // namespace dsinfer::engine
