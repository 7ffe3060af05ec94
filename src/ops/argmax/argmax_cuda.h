// CUDA greedy sampling: argmax per row of logits with the sampler's tie rule (ties -> lower token id,
// sampling/sampler.cpp). NaN logits never win (they compare false), so a row's NaNs are skipped; a row of only
// NaN gives 0, as the CPU reference does. Full sampling stays on the CPU for now.
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// logits: [R, V] fp32 (device); out: [R] int32 (device). One block of 1024 threads per row.
Status argmax_rows(const float* logits, int64_t R, int64_t V, int32_t* out, void* stream);

}  // namespace dsinfer::ops::cuda
