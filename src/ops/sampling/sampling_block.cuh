// Block-wide primitives of the CUDA sampler (sampling.cu): fixed-shape reductions, so every thread of a block
// gets bitwise the same result and a row's result never depends on timing. Internal to src/ops/sampling/.
#pragma once
#include <cuda_runtime.h>

#include <climits>

namespace dsinfer::ops::cuda::detail {
namespace sampling_block {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 16;  // 4-bit digits of the 64-bit keys: 16 passes per cut
constexpr unsigned kFull = 0xffffffffu;

struct Shared {
  double part[kWarps * kBins];  // per-warp partials of the digit bins
  double bin[kBins];
  double dd[kWarps];
  float ff[kWarps];
  int ii[kWarps];
  int result;
};

__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }
// (mv, mi) becomes (v, i) when that is better.
__device__ __forceinline__ void keep_best(float v, int i, float& mv, int& mi) {
  if (better(v, i, mv, mi)) {
    mv = v;
    mi = i;
  }
}

// Block reductions: every thread gets the same value (same operations in the same order everywhere).
__device__ inline double block_sum(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  if ((threadIdx.x & 31) == 0) sh.dd[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kWarps; ++w) s += sh.dd[w];
  __syncthreads();
  return s;
}

__device__ inline int block_sum_int(int v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  if ((threadIdx.x & 31) == 0) sh.ii[threadIdx.x >> 5] = v;
  __syncthreads();
  int s = 0;
  for (int w = 0; w < kWarps; ++w) s += sh.ii[w];
  __syncthreads();
  return s;
}

__device__ inline int block_min_int(int v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFull, v, o));
  if ((threadIdx.x & 31) == 0) sh.ii[threadIdx.x >> 5] = v;
  __syncthreads();
  int s = INT_MAX;
  for (int w = 0; w < kWarps; ++w) s = min(s, sh.ii[w]);
  __syncthreads();
  return s;
}

// (value desc, id asc) best of the block; (v, i) in and out.
__device__ inline void block_best(float& v, int& i, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) sh.ff[threadIdx.x >> 5] = v, sh.ii[threadIdx.x >> 5] = i;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w)
    if (better(sh.ff[w], sh.ii[w], v, i)) {
      v = sh.ff[w];
      i = sh.ii[w];
    }
  __syncthreads();
}

}  // namespace sampling_block
}  // namespace dsinfer::ops::cuda::detail
