// The token-fill gather of asynchronous steps (see token_fill_cuda.h; launcher in token_fill_launch.h). One thread
// per fill; every index is bounds-checked, because a row the sampler rejected carries token -1.
#include <cuda_runtime.h>

#include <algorithm>

#include "ops/token_fill/token_fill_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
__global__ void fill_step_tokens_kernel(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F,
                                        const SampleRowOut* sampled, int64_t num_sampled, int64_t vocab) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= F) return;
  const int32_t idx = fills[2 * i], row = fills[2 * i + 1];
  if (idx < 0 || idx >= T) return;
  const int32_t id = row >= 0 && row < num_sampled ? sampled[row].token : -1;
  tokens[idx] = id >= 0 && id < vocab ? id : 0;
}
}  // namespace

void launch_fill_step_tokens(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const SampleRowOut* sampled,
                             int64_t num_sampled, int64_t vocab, void* stream) {
  const int blocks = int((F + 127) / 128);
  fill_step_tokens_kernel<<<blocks, 128, 0, static_cast<cudaStream_t>(stream)>>>(tokens, T, fills, F, sampled,
                                                                                  num_sampled, vocab);
}

}  // namespace dsinfer::ops::cuda::detail
