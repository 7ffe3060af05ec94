// Rank-order sum of the ranks' buffers on one GPU (see rank_sum.h). Each thread owns whole elements: it reads every
// rank's value, adds them in rank order in fp64, rounds once and writes the result to every rank, so the in-place
// update never races with another thread's reads.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/parallel/rank_sum.h"

namespace dsinfer::backends::detail {

namespace {

__global__ void rank_order_sum_kernel(RankBuffers b, int32_t n, size_t count) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    double acc = 0.0;
    for (int32_t r = 0; r < n; ++r) acc += double(b.buf[r][i]);
    const float v = float(acc);
    for (int32_t r = 0; r < n; ++r) b.buf[r][i] = v;
  }
}

}  // namespace

void launch_rank_order_sum(const RankBuffers& b, int32_t n, size_t count, void* stream) {
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 4096);
  rank_order_sum_kernel<<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(b, n, count);
}

}  // namespace dsinfer::backends::detail
