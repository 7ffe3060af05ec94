// CUDA token embedding into the mHC residual streams: X[t, j, :] = table[tokens[t], :] for each of the n = hc_mult
// streams (architecture notes §2). Device pointers.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/embed/embed_launch.h"  // EmbedDType

namespace dsinfer::ops::cuda {

// table: [vocab, dim] fp32 or bf16 bits; tokens: [T] int32; X: [T, n, dim] fp32. A token id outside [0, vocab)
// writes NaN rows (ids are validated on the host before the step; NaN makes a missed check loud).
// One block of 256 threads per token.
Status embed(const void* table, EmbedDType dt, int64_t vocab, int64_t dim, const int32_t* tokens, int64_t T, int64_t n,
             float* X, void* stream);

}  // namespace dsinfer::ops::cuda
