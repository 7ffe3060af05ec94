// CUDA structured-output mask: logits of tokens a packed bitmask disallows become -inf, in place on the device.
// The bitmask is xgrammar's layout (sampling::TokenBitmask: token t of mask row m is allowed iff bit t % 32 of
// mask[m * words_per_row + t / 32] is set), so the CPU matchers' rows upload as they are. CPU reference:
// sampling::apply_token_bitmask (the CPU sampler's own mask step); ids past the mask (words_per_row * 32 < V)
// are disallowed, as there. Not wired into the CUDA runner yet: it copies logits to the host and samples there
// (docs/kernels.md); a GPU sampler (issue 14) calls this before its softmax.
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// logits: [*, V] fp32 rows, row stride logits_stride (>= V) floats (device). mask: [num_rows, words_per_row]
// int32 (device). row_ids: [num_rows] int32 logits rows (device), mask row m applies to logits row row_ids[m];
// null: mask row m applies to logits row m. Rows not named are left untouched.
Status apply_token_bitmask(float* logits, int64_t V, int64_t logits_stride, const int32_t* mask,
                           int32_t words_per_row, const int32_t* row_ids, int64_t num_rows, void* stream);

}  // namespace dsinfer::ops::cuda
