// Router top-k on the GPU (see moe_cuda.h; launcher in moe_launch.h): one warp per token; scores and biased scores
// of the token in shared memory, topk rounds of a warp arg-max under the total order (value desc, expert id asc) = route_ref's tie rule.
// Transcendentals are evaluated in double and rounded to float, as the CPU reference does, so scores agree to the
// last bit in practice and near-ties select the same experts.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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

__global__ void __launch_bounds__(kRouteWarps * 32)
    route_kernel(const float* logits, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                 const RouteArgs p, int32_t* idx, float* weight) {
  extern __shared__ float sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (t >= p.T) return;  // no block-level barriers below
  const int E = int(p.E);
  float* s = sm + int64_t(warp) * 2 * E;  // scores
  float* b = s + E;                       // biased scores (selection only)
  unsigned char* taken = reinterpret_cast<unsigned char*>(sm + int64_t(kRouteWarps) * 2 * E) + int64_t(warp) * E;
  const float* z = logits + t * E;

  if (p.score == int(ScoreFunc::Softmax)) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, z[e]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) {
      const float ev = float(exp(double(z[e] - mx)));
      s[e] = ev;
      sum += double(ev);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    for (int e = lane; e < E; e += 32) s[e] = float(double(s[e]) / sum);
  } else {
    for (int e = lane; e < E; e += 32) {
      const float zz = z[e];
      float v;
      if (p.score == int(ScoreFunc::SqrtSoftplus)) {
        const float sp = zz > 20.0f ? zz : float(log1p(exp(double(zz))));
        v = sqrtf(sp);
      } else {
        v = 1.0f / (1.0f + float(exp(double(-zz))));
      }
      s[e] = v;
    }
  }
  for (int e = lane; e < E; e += 32) {
    b[e] = s[e] + (bias ? bias[e] : 0.0f);
    taken[e] = 0;
  }
  __syncwarp();

  int32_t* out_idx = idx + t * p.topk;
  float* out_w = weight + t * p.topk;
  if (hash_table) {
    const int64_t tok = tokens[t];
    for (int64_t k = lane; k < p.topk; k += 32)
      out_idx[k] = (tok >= 0 && tok < p.hash_vocab) ? hash_table[tok * p.topk + k] : -1;
  } else {
    for (int64_t k = 0; k < p.topk; ++k) {
      float bv = 0.0f;
      int be = kNoExpert;
      for (int e = lane; e < E; e += 32)
        if (!taken[e] && better(b[e], e, bv, be)) {
          bv = b[e];
          be = e;
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
      if (be != kNoExpert && lane == (be & 31)) taken[be] = 1;
      __syncwarp();
    }
  }
  __syncwarp();
  if (lane == 0) {  // weights in k order, exactly as route_ref
    double sum = 0.0;
    for (int64_t k = 0; k < p.topk; ++k) {
      const int32_t e = out_idx[k];
      const float w = (e >= 0 && e < E) ? s[e] : 0.0f;
      out_w[k] = w;
      sum += double(w);
    }
    for (int64_t k = 0; k < p.topk; ++k) {
      float w = out_w[k];
      if (p.renormalize) w = float(double(w) / (sum + double(p.norm_eps)));
      out_w[k] = w * p.route_scale;
    }
  }
}

}  // namespace

void launch_route(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream) {
  const RouteArgs a{T, p.experts, p.topk, p.hash_vocab, int(p.score), p.renormalize, p.norm_eps, p.route_scale};
  const size_t smem = size_t(kRouteWarps) * size_t(p.experts) * (2 * sizeof(float) + 1);
  const unsigned blocks = unsigned((T + kRouteWarps - 1) / kRouteWarps);
  route_kernel<<<blocks, kRouteWarps * 32, smem, static_cast<cudaStream_t>(stream)>>>(logits, bias, hash_table, tokens,
                                                                                       a, idx, weight);
}

}  // namespace dsinfer::ops::cuda::detail
