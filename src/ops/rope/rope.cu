// CUDA fused per-head norm + RoPE (see rope_cuda.h). One warp per [dim] vector: pass 1 sums squares (double),
// pass 2 scales and rotates float4 chunks; pairs (2i, 2i+1) never straddle a chunk because dim - rope_dim is
// even and chunks start at multiples of 4.
#include "cuda/ops_device.cuh"
#include "ops/rope/rope_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;

__global__ void head_norm_rope_kernel(HeadNormRopeParams p, float* x, const int64_t* pos) {
  const int lane = threadIdx.x & 31;
  const int64_t vec = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (vec >= p.rows * p.heads) return;  // warp-uniform
  const int64_t row = vec / p.heads;
  float* v = x + vec * p.dim;
  const int nchunks = int(p.dim / 4);
  float inv = 1.0f;
  if (p.norm != HeadNorm::None) {
    double ss = 0.0;
    for (int c = lane; c < nchunks; c += 32) {
      const float4 a = reinterpret_cast<const float4*>(v)[c];
      ss += double(a.x) * double(a.x) + double(a.y) * double(a.y) + double(a.z) * double(a.z) + double(a.w) * double(a.w);
    }
    ss = dev::warp_sum(ss);
    inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.eps)));
  }
  const int64_t rope_start = p.dim - p.rope_dim, pp = pos[row];
  for (int c = lane; c < nchunks; c += 32) {
    float4 a = reinterpret_cast<float4*>(v)[c];
    float e[4] = {a.x, a.y, a.z, a.w};
    if (p.norm != HeadNorm::None) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float w = p.norm == HeadNorm::Weighted ? p.norm_w[4 * c + k] : 1.0f;
        e[k] = __fmul_rn(__fmul_rn(e[k], inv), w);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; k += 2) {
      const int64_t d = 4 * int64_t(c) + k;
      if (d >= rope_start) {
        float cs, sn;
        dev::rope_cos_sin(p.inv_freq[(d - rope_start) / 2], pp, p.attention_factor, p.inverse, cs, sn);
        dev::rope_rotate(e[k], e[k + 1], cs, sn);
      }
    }
    reinterpret_cast<float4*>(v)[c] = make_float4(e[0], e[1], e[2], e[3]);
  }
}
}  // namespace

void launch_head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream) {
  const int64_t blocks = (p.rows * p.heads + 7) / 8;
  head_norm_rope_kernel<<<unsigned(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, x, pos);
}

}  // namespace dsinfer::ops::cuda::detail
