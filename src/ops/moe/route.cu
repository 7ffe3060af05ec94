// Router top-k on the GPU (see moe_cuda.h; launcher in moe_launch.h): one block per token; its threads score the
// experts side by side into shared memory, then one warp holds them in registers (lane l: l, l + 32, ...) for topk
// rounds of a warp arg-max under the total order (value desc, expert id asc) = route_ref's tie rule.
// Transcendentals are evaluated in double and rounded to float, as the CPU reference does, so scores agree to the
// last bit in practice and near-ties select the same experts.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/pdl.cuh"
#include "ops/moe/moe_launch.h"

namespace dsinfer::ops::cuda::detail {
namespace {

constexpr int kNoExpert = 0x7fffffff;

struct RouteArgs {
  int64_t T, E, topk, hash_vocab;
  int score;  // ScoreFunc
  bool renormalize;
  float norm_eps, route_scale;
};

__device__ __forceinline__ bool better(float v, int e, float bv, int be) {
  return e != kNoExpert && (be == kNoExpert || v > bv || (v == bv && e < be));
}

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
    for (int e = tid; e < E; e += blockDim.x) {
      const float zz = z[e];
      if (p.score == int(ScoreFunc::SqrtSoftplus)) {
        const float sp = zz > 20.0f ? zz : float(log1p(exp(double(zz))));
        s[e] = sqrtf(sp);
      } else {
        s[e] = 1.0f / (1.0f + float(exp(double(-zz))));
      }
    }
    __syncthreads();
  }
  if (warp != 0) return;  // no block barriers below
  __syncwarp();
  float bv_[PL];  // biased scores (selection only)
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    if (e < E) bv_[i] = s[e] + (bias ? bias[e] : 0.0f);
  }

  int32_t* out_idx = idx + t * p.topk;
  float* out_w = weight + t * p.topk;
  if (hash_table) {
    const int64_t tok = tokens[t];
    for (int64_t k = lane; k < p.topk; k += 32)
      out_idx[k] = (tok >= 0 && tok < p.hash_vocab) ? hash_table[tok * p.topk + k] : -1;
  } else {
    uint32_t taken = 0;  // bit i: expert lane + 32 i is selected
    for (int64_t k = 0; k < p.topk; ++k) {
      float bv = 0.0f;
      int be = kNoExpert;
#pragma unroll
      for (int i = 0; i < PL; ++i) {
        const int e = lane + 32 * i;
        if (e < E && !(taken >> i & 1u) && better(bv_[i], e, bv, be)) {
          bv = bv_[i];
          be = e;
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oe = __shfl_xor_sync(0xffffffffu, be, off);
        if (better(ov, oe, bv, be)) {
          bv = ov;
          be = oe;
        }
      }
      if (lane == 0) out_idx[k] = be == kNoExpert ? -1 : be;
      if (be != kNoExpert && lane == (be & 31)) taken |= 1u << (be >> 5);
    }
  }
  __syncwarp();  // out_idx for every lane
  // Weights in k order, the sum in double in k order exactly as route_ref (lane 0), then renormalised by every lane.
  double sum = 0.0;
  if (lane == 0)
    for (int64_t k = 0; k < p.topk; ++k) {
      const int32_t e = out_idx[k];
      sum += double((e >= 0 && e < E) ? s[e] : 0.0f);
    }
  sum = __shfl_sync(0xffffffffu, sum, 0);
  for (int64_t k = lane; k < p.topk; k += 32) {
    const int32_t e = out_idx[k];
    float w = (e >= 0 && e < E) ? s[e] : 0.0f;
    if (p.renormalize) w = float(double(w) / (sum + double(p.norm_eps)));
    out_w[k] = w * p.route_scale;
  }
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
  const RouteArgs a{T, p.experts, p.topk, p.hash_vocab, int(p.score), p.renormalize, p.norm_eps, p.route_scale};
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
