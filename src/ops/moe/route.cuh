// The router's per-token arithmetic on the GPU (route.cu's route_kernel; the drafter's fused MoE routes its tokens
// with the same functions, ops/draft_kernels): the element-wise scores, and one warp's top-k selection and weights
// under the total order (value desc, expert id asc) = route_ref's tie rule. Transcendentals in double rounded to
// float, as the CPU reference does. Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/moe/moe_launch.h"  // RouterCudaParams, ScoreFunc

namespace dsinfer::ops::cuda::detail {

inline constexpr int kNoExpert = 0x7fffffff;

struct RouteArgs {
  int64_t T, E, topk, hash_vocab;
  int score;  // ScoreFunc
  bool renormalize;
  float norm_eps, route_scale;
};

// The kernels' arguments for T tokens routed as `p` says.
__host__ __device__ inline RouteArgs route_args(int64_t T, const RouterCudaParams& p) {
  return RouteArgs{T, p.experts, p.topk, p.hash_vocab, int(p.score), p.renormalize, p.norm_eps, p.route_scale};
}

__device__ __forceinline__ bool route_better(float v, int e, float bv, int be) {
  return e != kNoExpert && (be == kNoExpert || v > bv || (v == bv && e < be));
}

// The score of one logit for the element-wise scoring functions (ScoreFunc::SqrtSoftplus, else the sigmoid).
__device__ __forceinline__ float route_score(float z, int score) {
  if (score == int(ScoreFunc::SqrtSoftplus)) {
    const float sp = z > 20.0f ? z : float(log1p(exp(double(z))));
    return sqrtf(sp);
  }
  return 1.0f / (1.0f + float(exp(double(-z))));
}

// One full warp selects a token's top-k from its scores s[0, E) (E <= 32 * PL; memory every lane reads) plus bias
// (may be null), or takes hash_table's row of *token (DeepSeek's hash layers), and writes the ids to out_idx and the
// weights to out_w (topk each; out_idx is read back by every lane, so it must be memory the warp shares). The weights
// sum in double in k order as route_ref (lane 0), then renormalised by every lane.
template <int PL>
__device__ __forceinline__ void route_select_warp(const float* s, const float* bias, const int32_t* hash_table,
                                                  const int32_t* token, const RouteArgs& p, int32_t* out_idx,
                                                  float* out_w) {
  const int lane = int(threadIdx.x & 31);
  const int E = int(p.E);
  float bv_[PL];  // biased scores (selection only)
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    if (e < E) bv_[i] = s[e] + (bias ? bias[e] : 0.0f);
  }

  if (hash_table) {
    const int64_t tok = *token;
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
        if (e < E && !(taken >> i & 1u) && route_better(bv_[i], e, bv, be)) {
          bv = bv_[i];
          be = e;
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oe = __shfl_xor_sync(0xffffffffu, be, off);
        if (route_better(ov, oe, bv, be)) {
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

}  // namespace dsinfer::ops::cuda::detail
