// Asynchronous steps: the device gather that puts the ids sampled by the previous step into this step's packed
// token array, so the step can be launched before the host has read them (plain header). CPU reference:
// backends::fill_step_tokens_ref (step_plan.h).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/sampling/sampling.h"

namespace dsinfer::ops::cuda {

// For i < F: tokens[fills[2i]] = sampled[fills[2i + 1]].token, where an index outside [0, T), a row outside
// [0, num_sampled) or an id outside [0, vocab) (a row the sampler rejected) writes 0 / nothing, never out of bounds.
// Device pointers; runs on `stream` after the upload of the plan and the sampling that produced `sampled`.
Status fill_step_tokens(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const SampleRowOut* sampled,
                        int64_t num_sampled, int64_t vocab, void* stream);

}  // namespace dsinfer::ops::cuda
