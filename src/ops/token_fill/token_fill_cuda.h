// Asynchronous steps: the device gather that puts the ids sampled by the previous step into this step's packed
// token array, so the step can be launched before the host has read them; and the chained verify step's fill, which
// moves a verify step's tokens and positions past the speculative round before it (plain header). CPU references:
// backends::fill_step_tokens_ref / fill_chained_step_ref (step_plan.h).
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

// The chained verify step (ModelRunner::begin_chained_step) of S sequences of n tokens each, packed in order, whose
// start_pos[s] holds the start of the round before it: with a = accepted[s] clamped to [0, block], sequence s
// starts at start_pos[s] + 1 + a, its first token the round's token after the accepted drafts
// (verified[s * (block + 1) + a]), the next n - 1 the round's drafts (drafts[s * block ..]); pos follows, and
// start_pos[s] moves there. n in [1, block + 1], S * n <= 1024. Device pointers, on `stream` after the round.
Status fill_chained_step(int32_t* tokens, int64_t* pos, int64_t* start_pos, int64_t S, int64_t n,
                         const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int64_t block,
                         void* stream);

}  // namespace dsinfer::ops::cuda
