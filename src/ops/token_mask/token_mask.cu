// CUDA token bitmask (see token_mask_cuda.h). One thread per logit: the 32 lanes of a warp cover one mask word
// (the word is a broadcast load), and only disallowed logits are written, so a step costs the mask words read
// plus 4 bytes per masked-out token, with coalesced stores. grid.y = mask row; grid.x strides over the vocabulary.
#include <cuda_runtime.h>

#include "ops/token_mask/token_mask_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
constexpr int kThreads = 256;

__global__ void apply_token_bitmask_kernel(float* logits, int64_t V, int64_t stride, const int32_t* mask,
                                           int32_t words_per_row, const int32_t* row_ids) {
  const int64_t m = blockIdx.y;
  const int64_t row = row_ids ? int64_t(row_ids[m]) : m;
  float* out = logits + row * stride;
  const int32_t* words = mask + m * int64_t(words_per_row);
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < V; i += int64_t(gridDim.x) * kThreads) {
    const int64_t w = i >> 5;
    const uint32_t bits = w < words_per_row ? uint32_t(words[w]) : 0u;  // ids past the mask: disallowed
    if (!((bits >> (i & 31)) & 1u)) out[i] = -INFINITY;
  }
}
}  // namespace

void launch_apply_token_bitmask(float* logits, int64_t V, int64_t logits_stride, const int32_t* mask,
                                int32_t words_per_row, const int32_t* row_ids, int64_t num_rows, void* stream) {
  // Enough blocks per row to cover V once up to 128 (V = 129280 needs 506: the loop strides over the rest).
  const int64_t blocks = (V + kThreads - 1) / kThreads;
  const dim3 grid(unsigned(blocks < 128 ? blocks : 128), unsigned(num_rows));
  apply_token_bitmask_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(logits, V, logits_stride, mask,
                                                                                        words_per_row, row_ids);
}

}  // namespace dsinfer::ops::cuda::detail
