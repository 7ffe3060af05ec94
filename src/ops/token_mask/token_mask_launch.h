// Kernel launcher behind token_mask_cuda.h (no CUDA types, no Status; validated by token_mask_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {
void launch_apply_token_bitmask(float* logits, int64_t V, int64_t logits_stride, const int32_t* mask,
                                int32_t words_per_row, const int32_t* row_ids, int64_t num_rows, void* stream);
}  // namespace dsinfer::ops::cuda::detail
