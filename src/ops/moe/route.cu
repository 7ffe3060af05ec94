// Router top-k on the GPU (see moe_cuda.h; launcher in moe_launch.h): one block per token; its threads score the
// experts side by side into shared memory, then one warp holds them in registers (lane l: l, l + 32, ...) for topk
// rounds of a warp arg-max (route.cuh: the scores and the selection, shared with the drafter's fused MoE).
// Transcendentals are evaluated in double and rounded to float, as the CPU reference does, so scores agree to the
// last bit in practice and near-ties select the same experts.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/pdl.cuh"
#include "ops/moe/moe_launch.h"
#include "ops/moe/route.cuh"

namespace dsinfer::ops::cuda::detail {
namespace {

// PL = experts per lane of the selecting warp: a power of two with 32 * PL >= E. One block of route_threads(PL)
// threads a token: every thread scores experts tid, tid + blockDim.x, ... into shared memory (the double-precision
// transcendentals side by side, not PL after one another in one lane); warp 0 then selects and weights as one warp
// per token did (the same arithmetic, sums and scan order, so the same experts and weights bit for bit).
template <int PL>
__global__ void __launch_bounds__(kRouteMaxThreads)
    route_kernel(const float* logits, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                 const RouteArgs p, int32_t* idx, float* weight) {
  dsinfer::cuda::pdl_wait_then_release();  // the logits come from the kernel before
  extern __shared__ float s[];             // the token's scores
  __shared__ float part_max[kRouteMaxThreads / 32];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t t = blockIdx.x;
  const int E = int(p.E);
  const float* z = logits + t * E;

  if (p.score == int(ScoreFunc::Softmax)) {
    float mx = -INFINITY;  // a maximum: the same in any order
    for (int e = tid; e < E; e += blockDim.x) mx = fmaxf(mx, z[e]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) part_max[warp] = mx;
    __syncthreads();
    for (int w = 0; w < int(blockDim.x >> 5); ++w) mx = fmaxf(mx, part_max[w]);
    for (int e = tid; e < E; e += blockDim.x) s[e] = float(exp(double(z[e] - mx)));
    __syncthreads();
    if (warp == 0) {  // the sum in one warp's order: lane l adds l, l + 32, ... in turn, then the butterfly
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < PL; ++i)
        if (lane + 32 * i < E) sum += double(s[lane + 32 * i]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
#pragma unroll
      for (int i = 0; i < PL; ++i)
        if (lane + 32 * i < E) s[lane + 32 * i] = float(double(s[lane + 32 * i]) / sum);
    }
  } else {
    for (int e = tid; e < E; e += blockDim.x) s[e] = route_score(z[e], p.score);
    __syncthreads();
  }
  if (warp != 0) return;  // no block barriers below
  __syncwarp();
  route_select_warp<PL>(s, bias, hash_table, tokens ? tokens + t : nullptr, p, idx + t * p.topk, weight + t * p.topk);
}

template <int PL>
cudaError_t launch_pl(const float* logits, int64_t T, const float* bias, const int32_t* hash_table,
                      const int32_t* tokens, const RouteArgs& a, int32_t* idx, float* weight, cudaStream_t stream) {
  const size_t smem = size_t(a.E) * sizeof(float);
  const unsigned threads = unsigned(32 * PL < kRouteMaxThreads ? 32 * PL : kRouteMaxThreads);
  return dsinfer::cuda::pdl_launch(route_kernel<PL>, dim3(unsigned(T)), dim3(threads), smem, stream, logits, bias,
                                   hash_table, tokens, a, idx, weight);
}

}  // namespace

void launch_route(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream) {
  const RouteArgs a = route_args(T, p);
  const auto st = static_cast<cudaStream_t>(stream);
  const int64_t per_lane = (p.experts + 31) / 32;  // <= 32: route_cuda takes at most 1,024 experts
  if (per_lane <= 1) launch_pl<1>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
  else if (per_lane <= 2) launch_pl<2>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
  else if (per_lane <= 4) launch_pl<4>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
  else if (per_lane <= 8) launch_pl<8>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
  else if (per_lane <= 16) launch_pl<16>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
  else launch_pl<32>(logits, T, bias, hash_table, tokens, a, idx, weight, st);
}

}  // namespace dsinfer::ops::cuda::detail
