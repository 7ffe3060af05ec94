// Kernel launcher behind token_fill_cuda.h (no CUDA types, no Status; validated by token_fill_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/sampling/sampling.h"

namespace dsinfer::ops::cuda::detail {
void launch_fill_step_tokens(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const SampleRowOut* sampled,
                             int64_t num_sampled, int64_t vocab, void* stream);  // token_fill.cu
void launch_fill_chained_step(int32_t* tokens, int64_t* pos, int64_t* start_pos, int32_t S, int32_t n,
                              const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int32_t block,
                              void* stream);  // token_fill.cu
}  // namespace dsinfer::ops::cuda::detail
