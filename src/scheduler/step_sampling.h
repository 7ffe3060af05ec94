// sample_step: runs the reference Sampler over every logits row of a BatchPlan and packages the results as
// Scheduler::update() inputs. Each row is sampled from its own params / history / RNG key only, so the
// tokens do not depend on the batch composition (given batch-invariant logits).
#pragma once
#include <span>
#include <vector>

#include "sampling/row_pack.h"
#include "sampling/sampler.h"
#include "scheduler/scheduler.h"

namespace dsinfer::scheduler {

// logits: [plan.num_logits(), vocab_size] row-major, row r for the SeqPlan with logits_row == r. A row holding
// a NaN or an infinity (a broken model or checkpoint) is not sampled: its plan index goes to `nonfinite` and
// the caller fails that request; every other row is sampled as usual. bitmask (structured outputs; null =
// none): row r's allowed tokens, applied before anything else.
Status sample_step(const BatchPlan& plan, std::span<const float> logits, int64_t vocab_size, int64_t eos_token_id,
                   sampling::Sampler& sampler, std::vector<StepOutput>& out, std::vector<int32_t>& nonfinite,
                   const sampling::TokenBitmask* bitmask = nullptr);

// Device sampling (ops/sampling): the same rows, described for the device sampler instead of sampled here, in
// plan order (the order collect_device_samples expects). Raw logprobs, as the engine's host Sampler.
Status pack_step_rows(const BatchPlan& plan, int64_t vocab_size, int64_t eos_token_id,
                      const sampling::TokenBitmask* bitmask, sampling::PackedRows& rows);
// The device results of pack_step_rows' rows -> update() inputs; rows the device found non-finite go to
// `nonfinite` (plan indices), as in sample_step. A result the device rejected is an error.
Status collect_device_samples(const BatchPlan& plan, std::span<const ops::SampleRowOut> results,
                              std::vector<StepOutput>& out, std::vector<int32_t>& nonfinite);

}  // namespace dsinfer::scheduler
