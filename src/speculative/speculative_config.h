// SpeculativeConfig: the speculative-decoding settings, checked and resolved in one place (Engine::create calls
// resolve_speculative_config once and passes the result down to the state layout, the scheduler, the drafters
// and the Speculator). It holds which drafter, how many drafts a sequence gets per step (num_speculative_tokens,
// the one name of that number: the option's "0 = the drafter's maximum" is resolved here and its range checked
// here), the drafter's keys of config.json (read here, once) and the confidence schedule.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"
#include "speculative/draft_config.h"

namespace dsinfer::speculative {

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kOff;
  int32_t num_speculative_tokens = 0;  // drafts per sequence per step: >= 1 when a method is on, else 0
  std::string model_dir;               // where the drafter's weights are
  DraftConfig draft;                   // model_dir/config.json's drafter keys
  int64_t budget = 0;                  // most drafts verified per step over all sequences (0 = no limit)
  double min_survival = 0;             // least cumulative survival a verified draft needs
  // The step cost model (EngineOptions::speculative_cost_model): "auto", "off" or a file path; resolved into a
  // StepCostModel by the engine at start-up (engine/step_cost_setup.h), the runner being needed to time steps.
  std::string cost_model = "auto";
  // The gate's drain rule and a one-wait round costed without the host's row time (SpecGate::drain_pays,
  // StepCostModel::without_round_host): DSINFER_SPEC_DRAIN_GATE=1, resolved in engine_config.cpp. Off by default
  // until measured on a GPU (bench/NOTES.md session 49).
  bool drain_gate = false;
  bool enabled() const { return method != SpecMethod::kOff; }
};

// The most drafts per step `method`'s drafter proposes: DSpark its block (dspark_block_size), MTP-1 one.
int32_t max_speculative_tokens(SpecMethod method, const DraftConfig& draft);

// Parses `method` ("off", "dspark", "mtp1"), reads the drafter config of `model_dir` when a method is on, and
// checks every value, naming the option: num_speculative_tokens in [0, the drafter's maximum] (0 = the maximum),
// budget >= 0, min_survival in [0, 1], cost_model non-empty. Off: the other values are not looked at.
Result<SpeculativeConfig> resolve_speculative_config(const std::string& method, int32_t num_speculative_tokens,
                                                     int64_t budget, double min_survival,
                                                     const std::string& cost_model, const std::string& model_dir);

}  // namespace dsinfer::speculative
