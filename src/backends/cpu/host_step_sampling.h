// Asynchronous steps on the host (the cpu backend's ranks, docs/multi_gpu.md "Asynchronous steps at N > 1"): what a
// step queued by begin_sampled_step keeps of the engine's plan, and the "device" sampling of launch_sample_rows done
// with the reference Sampler. The engine's plan points into the scheduler (block tables, histories, params), which
// changes as soon as the call returns, so the queued step owns copies; its token fills (BatchPlan::token_fills) are
// resolved when it runs, from the ids of the sampling queued before it, exactly as the device gather does (an id
// that is not a valid token becomes 0).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "ops/sampling/sampling.h"
#include "sampling/row_pack.h"
#include "sampling/sampler.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::backends {

class HostStep {
 public:
  // Copies what the forward and the sampler read of `plan` (the sampler's inputs for every row that needs logits,
  // in plan order: the rows pack_step_rows describes).
  explicit HostStep(const scheduler::BatchPlan& plan);
  HostStep(const HostStep&) = delete;
  HostStep& operator=(const HostStep&) = delete;

  // Takes the pending input tokens from `prev` (the previous sampling's ids, by row) and puts them in the plan and
  // in the histories whose last token they are. Errors name a fill that names no row.
  Status resolve_fills(std::span<const int32_t> prev);
  // The plan the ranks run (block tables and histories point into this object; no token fills left).
  const scheduler::BatchPlan& plan() const { return plan_; }
  // Samples every row `rows` describes from `logits` ([plan.num_logits(), vocab]) with the Sampler's inputs of the
  // row; a row holding NaN or an infinity is not sampled (kSampleNonFinite, token -1), as the device sampler.
  Status sample(const sampling::PackedRows& rows, std::span<const float> logits, int64_t vocab, int64_t eos_token_id,
                sampling::Sampler& sampler, std::vector<ops::SampleRowOut>& out) const;

 private:
  struct Row {
    sampling::SamplingParams params;
    bool has_params = false;
    std::vector<int32_t> prompt, output;
    sampling::RngKey rng;
    int32_t last_token = -1;  // the flat index of the row's last input token (its fill resolves the history's last)
  };
  scheduler::BatchPlan plan_;
  std::vector<std::vector<cache::BlockId>> tables_;
  std::vector<Row> rows_;
  std::vector<scheduler::TokenFill> fills_;
};

}  // namespace dsinfer::backends
