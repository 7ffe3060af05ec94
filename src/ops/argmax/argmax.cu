// CUDA row argmax (see argmax_cuda.h): strided per-thread scan, then a (value desc, index asc) tree reduction.
#include <cuda_runtime.h>

#include <climits>

#include "cuda/pdl.cuh"

#include "ops/argmax/argmax_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

__global__ void argmax_kernel(const float* logits, int64_t V, int32_t* out) {
  dsinfer::cuda::pdl_wait_then_release();
  const float* row = logits + int64_t(blockIdx.x) * V;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (better(row[i], int(i), bv, bi)) {
      bv = row[i];
      bi = int(i);
    }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (better(sv[w], si[w], bv, bi)) {
        bv = sv[w];
        bi = si[w];
      }
    out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
  }
}
}  // namespace

void launch_argmax_rows(const float* logits, int64_t R, int64_t V, int32_t* out, void* stream) {
  dsinfer::cuda::pdl_launch(argmax_kernel, dim3(unsigned(R)), dim3(1024), 0, static_cast<cudaStream_t>(stream), logits,
                            V, out);
}

}  // namespace dsinfer::ops::cuda::detail
