// Router top-k on the GPU (see moe_cuda.h; launcher in moe_launch.h): one warp per token, its experts in registers
// (lane l holds l, l + 32, ...: the logits loaded at once), topk rounds of a warp arg-max under the total order (value
// desc, expert id asc) = route_ref's tie rule; the scores also in shared memory for the weights.
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

// PL = experts per lane: a power of two with 32 * PL >= E.
template <int PL>
__global__ void __launch_bounds__(kRouteWarps * 32)
    route_kernel(const float* logits, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                 const RouteArgs p, int32_t* idx, float* weight) {
  dsinfer::cuda::pdl_wait_then_release();  // the logits come from the kernel before
  extern __shared__ float sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (t >= p.T) return;  // no block-level barriers below
  const int E = int(p.E);
  float* s = sm + int64_t(warp) * E;  // scores of this warp's token
  const float* z = logits + t * E;

  float zv[PL], sv[PL];
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    zv[i] = e < E ? z[e] : 0.0f;
  }
  if (p.score == int(ScoreFunc::Softmax)) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < PL; ++i)
      if (lane + 32 * i < E) mx = fmaxf(mx, zv[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      sv[i] = float(exp(double(zv[i] - mx)));
      if (lane + 32 * i < E) sum += double(sv[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
#pragma unroll
    for (int i = 0; i < PL; ++i) sv[i] = float(double(sv[i]) / sum);
  } else {
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      const float zz = zv[i];
      if (p.score == int(ScoreFunc::SqrtSoftplus)) {
        const float sp = zz > 20.0f ? zz : float(log1p(exp(double(zz))));
        sv[i] = sqrtf(sp);
      } else {
        sv[i] = 1.0f / (1.0f + float(exp(double(-zz))));
      }
    }
  }
  float bv_[PL];  // biased scores (selection only)
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    if (e < E) {
      s[e] = sv[i];
      bv_[i] = sv[i] + (bias ? bias[e] : 0.0f);
    }
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
  __syncwarp();  // out_idx and the scores in shared memory, for every lane
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
  const size_t smem = size_t(kRouteWarps) * size_t(a.E) * sizeof(float);
  const unsigned blocks = unsigned((T + kRouteWarps - 1) / kRouteWarps);
  return dsinfer::cuda::pdl_launch(route_kernel<PL>, dim3(blocks), dim3(kRouteWarps * 32), smem, stream, logits, bias,
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
