// The token-fill gather of asynchronous steps and the chained verify step's fill (see token_fill_cuda.h; launchers in
// token_fill_launch.h). One thread per fill / token; every index is bounds-checked, because a row the sampler
// rejected carries token -1.
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

// One thread per token of the S sequences (n tokens each): thread (s, 0) also moves start_pos[s]. Every thread reads
// the unmoved start_pos[s]; the block's barrier orders the one write after every read (one block: n * S <= 1024).
__global__ void fill_chained_step_kernel(int32_t* tokens, int64_t* pos, int64_t* start_pos, int32_t S, int32_t n,
                                         const int32_t* accepted, const int32_t* verified, const int32_t* drafts,
                                         int32_t block) {
  const int32_t i = int32_t(threadIdx.x), s = i / n, j = i - s * n;
  int64_t start = 0;
  if (s < S) {
    const int32_t a = min(max(accepted[s], 0), block);
    start = start_pos[s] + 1 + a;
    tokens[i] = j == 0 ? verified[s * (block + 1) + a] : drafts[s * block + j - 1];
    pos[i] = start + j;
  }
  __syncthreads();
  if (s < S && j == 0) start_pos[s] = start;
}
}  // namespace

void launch_fill_chained_step(int32_t* tokens, int64_t* pos, int64_t* start_pos, int32_t S, int32_t n,
                              const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int32_t block,
                              void* stream) {
  fill_chained_step_kernel<<<1, S * n, 0, static_cast<cudaStream_t>(stream)>>>(tokens, pos, start_pos, S, n, accepted,
                                                                               verified, drafts, block);
}

void launch_fill_step_tokens(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const SampleRowOut* sampled,
                             int64_t num_sampled, int64_t vocab, void* stream) {
  const int blocks = int((F + 127) / 128);
  fill_step_tokens_kernel<<<blocks, 128, 0, static_cast<cudaStream_t>(stream)>>>(tokens, T, fills, F, sampled,
                                                                                  num_sampled, vocab);
}

}  // namespace dsinfer::ops::cuda::detail
