// Step cost profiling for speculative decoding (speculative/step_cost.h): times real verify steps of the model
// loaded, through the ModelRunner interface only, on the state the engine bound (values are whatever the slots
// hold: no sequence is live yet, and every position a sequence reads is written by it first). Batch sizes 1, 2, 4,
// ... up to max_seqs (and max_seqs itself), rows 1 (a decode step) to max_rows per sequence, at `context`
// positions; one warm-up step per shape (it also captures the shape's CUDA graph), then `iters` timed steps. With a
// drafter, also a drafting round (the ingest of two positions and a propose with greedy picks) of each batch size's
// sequences, max_rows - 1 drafts each, anchored at the same positions (its state rows hold whatever they hold:
// timing only); the host's greedy sampling of one verified row, timed over the largest step's logits; where the
// runner samples on the device, the engine's plain decode step of each batch size (pipelined as the engine's
// asynchronous steps are): what a step at rest costs, the rate drafting must beat; and where the drafter also has
// the one-wait round (Drafter::supports_round), that round of each batch size at max_rows rows, timed as the engine
// runs it: what a speculative step costs.
#pragma once
#include <string>

#include "cache/state_layout.h"
#include "runner/model_runner.h"
#include "speculative/drafter.h"
#include "speculative/step_cost.h"

namespace dsinfer::perf {

struct StepProfileOptions {
  int64_t max_seqs = 1;   // <= the bound slots
  int32_t max_rows = 1;   // 1 + the most drafts a sequence verifies
  int64_t context = 256;  // positions before the step's tokens (clamped to the state's length)
  int64_t iters = 3;
  std::string key;        // what the model is keyed by (model, GPU, numerics)
};

// The fitted model; an error names the shape whose step failed. `num_blocks` / `max_model_len`: the bound state's.
Result<speculative::StepCostModel> profile_step_cost(runner::ModelRunner& runner, const cache::StateLayout& layout,
                                                     int32_t num_blocks, int64_t max_model_len,
                                                     const StepProfileOptions& options,
                                                     speculative::Drafter* drafter = nullptr);

}  // namespace dsinfer::perf
