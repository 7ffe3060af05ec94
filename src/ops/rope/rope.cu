// CUDA fused per-head norm + RoPE (see rope_cuda.h). One warp per [dim] vector: pass 1 sums squares (double),
// pass 2 scales and rotates float4 chunks (the vector held in registers between them up to 512 channels; the block's
// cos / sin staged in shared memory, session 19); pairs (2i, 2i+1) never straddle a chunk because dim - rope_dim is
// even and chunks start at multiples of 4. Pass 2 then applies the fused epilogues in registers: the bf16
// rounding of the rotated channels and the FP8 block simulation, whose block amax is a max over the lanes that
// hold the block (fp8_block / 4 consecutive lanes of one 32-chunk step: chunk c = step * 32 + lane covers channels
// [4c, 4c + 4), so a block of B channels is lanes [k B/4, (k+1) B/4) of one step). A max is exact in any order,
// so the result equals fp8_block_sim's bit for bit. The Hadamard epilogue (vectors of <= 128 channels: one step)
// runs the butterflies of dev::smem_hadamard in double registers, stages h < 4 inside a lane and h >= 4 across
// lanes (partner lane ^ h/4), each pair combined by the same a + b / a - b: the same bits as hadamard_fp4_sim.
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/rope/rope_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;

// Block quantization simulation of this lane's 4 values e (in: this lane's chunk takes part), as
// dev::smem_block_quant_sim: the block amax over `group` consecutive lanes (a power of two <= 32), floored, a
// power-of-two scale, e4m3 (fp8) or e2m1 rounding. Warp-collective: every lane calls it.
__device__ __forceinline__ void block_quant_sim(float (&e)[4], bool in, int group, bool fp8) {
  const float qmax = fp8 ? 448.0f : 6.0f;
  const float amax_floor = fp8 ? 1e-4f : 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126
  float amax = in ? fmaxf(fmaxf(fabsf(e[0]), fabsf(e[1])), fmaxf(fabsf(e[2]), fabsf(e[3]))) : 0.0f;
  for (int o = group / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(dev::kFull, amax, o));
  const float s = dev::pow2_scale(fmaxf(amax_floor, amax), qmax);
  if (!in) return;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float x = fminf(fmaxf(__fdiv_rn(e[k], s), -qmax), qmax);
    e[k] = __fmul_rn(fp8 ? dev::round_e4m3(x) : dev::round_e2m1(x), s);
  }
}

// Normalized Walsh-Hadamard transform of a vector of 4 * nchunks channels (nchunks a power of two <= 32), lane l
// holding channels [4l, 4l + 4) in e (zeros beyond nchunks). Warp-collective.
__device__ __forceinline__ void warp_hadamard(float (&e)[4], int nchunks) {
  const int lane = threadIdx.x & 31;
  double d[4] = {double(e[0]), double(e[1]), double(e[2]), double(e[3])};
#pragma unroll
  for (int h = 1; h < 4; h *= 2) {  // pairs (j, j + h) inside the lane
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j & h) continue;
      const double a = d[j], b = d[j + h];
      d[j] = a + b;
      d[j + h] = a - b;
    }
  }
  for (int lh = 1; lh < nchunks; lh *= 2) {  // h = 4 lh: the partner lane holds the other element of each pair
    const bool upper = (lane & lh) != 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const double o = __shfl_xor_sync(dev::kFull, d[k], lh);
      d[k] = upper ? o - d[k] : d[k] + o;
    }
  }
  const double sc = 1.0 / sqrt(double(4 * nchunks));
#pragma unroll
  for (int k = 0; k < 4; ++k) e[k] = float(d[k] * sc);
}

// cos / sin of the rotated pairs staged per block (session 19): a block's 8 vectors are 8 heads of one or two rows
// (V4's query: 64 heads), and every head of a row rotates by the same angles, so the block computes each (row, pair)
// once (dev::rope_cos_sin, a double sincos: at 4,096 tokens x 64 heads x 32 pairs it was ~100 us of fp64 issue per
// call, 8x redundant) instead of every warp. The same function on the same inputs: the same bits.
constexpr int kWarpsPerBlock = 8;
constexpr int kTabPairs = 512;  // 8 rows of 64 pairs; larger spans compute in the warps as before

// Fills tab with (cos, sin) of pairs [0, rope_dim / 2) for the rows of vectors [v0, v0 + 8) and returns it, or
// nullptr where there is nothing to stage or it does not fit. Block-collective (the conditions are block-uniform).
__device__ const float2* stage_cos_sin(const HeadNormRopeParams& p, const int64_t* pos, int64_t v0, float2* tab) {
  const int64_t total = p.rows * p.heads, pairs = p.rope_dim / 2;
  if (pairs == 0 || v0 >= total) return nullptr;
  const int64_t vlast = (v0 + kWarpsPerBlock < total ? v0 + kWarpsPerBlock : total) - 1, r0 = v0 / p.heads;
  const int64_t entries = (vlast / p.heads - r0 + 1) * pairs;
  if (entries > kTabPairs) return nullptr;
  for (int64_t i = threadIdx.x; i < entries; i += blockDim.x) {
    float c, sn;
    dev::rope_cos_sin(p.inv_freq[i % pairs], pos[r0 + i / pairs], p.attention_factor, p.inverse, c, sn);
    tab[i] = make_float2(c, sn);
  }
  __syncthreads();
  return tab;
}

__device__ __forceinline__ double sum_sq4(const float4& a) {
  return double(a.x) * double(a.x) + double(a.y) * double(a.y) + double(a.z) * double(a.z) + double(a.w) * double(a.w);
}

// One 32-chunk step of vector v (chunk c0 + lane, its 4 values a when `have`): the norm scale, the RoPE, the fused
// epilogues, the store. Warp-collective (the epilogues' shuffles need every lane).
__device__ __forceinline__ void norm_rope_step(const HeadNormRopeParams& p, float* v, int c0, float4 a, float inv,
                                               int64_t pp, const float2* cs_row) {
  const int lane = threadIdx.x & 31;
  const int nchunks = int(p.dim / 4);
  const int64_t rope_start = p.dim - p.rope_dim;
  const int group = int(p.fp8_block / 4);  // lanes per FP8 block (a power of two <= 32)
  const int c = c0 + lane;
  const bool have = c < nchunks;
  float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (have) {
    e[0] = a.x;
    e[1] = a.y;
    e[2] = a.z;
    e[3] = a.w;
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
        if (cs_row) {
          const float2 t = cs_row[(d - rope_start) / 2];
          cs = t.x;
          sn = t.y;
        } else {
          dev::rope_cos_sin(p.inv_freq[(d - rope_start) / 2], pp, p.attention_factor, p.inverse, cs, sn);
        }
        dev::rope_rotate(e[k], e[k + 1], cs, sn);
        if (p.round_rope_bf16) {
          e[k] = dev::round_bf16(e[k]);
          e[k + 1] = dev::round_bf16(e[k + 1]);
        }
      }
    }
  }
  if (4 * int64_t(c0) < p.fp8_dims)  // warp-uniform: this step holds FP8 channels
    block_quant_sim(e, have && 4 * int64_t(c) < p.fp8_dims, group, true);
  if (p.fp4_block > 0) {  // the whole vector is this one step (dim <= 128)
    warp_hadamard(e, nchunks);
    block_quant_sim(e, have, int(p.fp4_block / 4), false);
  }
  if (have) reinterpret_cast<float4*>(v)[c] = make_float4(e[0], e[1], e[2], e[3]);
}

// Vector `vec` of p over x. Warp-collective: all 32 lanes call it with the same vec. tab: the block's staged cos /
// sin (rows from r0) or nullptr. Vectors of <= kRegSteps steps (dim <= 512: V4's query and KV) come in `a`, loaded
// by norm_rope_block before the angles are staged (their latency overlaps the sincos), and stay in registers for the
// second pass (session 19: it read them again, step by step); longer ones loop over memory as before. Same
// arithmetic in the same order either way.
constexpr int kRegSteps = 4;
__device__ __forceinline__ void norm_rope_vec(const HeadNormRopeParams& p, float* x, const int64_t* pos, int64_t vec,
                                              const float2* tab, int64_t r0, const float4 (&a)[kRegSteps]) {
  const int lane = threadIdx.x & 31;
  const int64_t row = vec / p.heads;
  float* v = x + vec * p.dim;
  const float4* v4 = reinterpret_cast<const float4*>(v);
  const int nchunks = int(p.dim / 4);
  const int64_t pp = p.rope_dim > 0 ? pos[row] : 0;
  const float2* cs_row = tab ? tab + (row - r0) * (p.rope_dim / 2) : nullptr;
  float inv = 1.0f;
  if (nchunks <= 32 * kRegSteps) {
    if (p.norm != HeadNorm::None) {
      double ss = 0.0;
#pragma unroll
      for (int s = 0; s < kRegSteps; ++s)
        if (32 * s + lane < nchunks) ss += sum_sq4(a[s]);
      ss = dev::warp_sum(ss);
      inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.eps)));
    }
#pragma unroll
    for (int s = 0; s < kRegSteps; ++s)
      if (32 * s < nchunks) norm_rope_step(p, v, 32 * s, a[s], inv, pp, cs_row);  // warp-uniform
    return;
  }
  if (p.norm != HeadNorm::None) {
    double ss = 0.0;
    for (int c = lane; c < nchunks; c += 32) ss += sum_sq4(v4[c]);
    ss = dev::warp_sum(ss);
    inv = float(1.0 / sqrt(ss / double(p.dim) + double(p.eps)));
  }
  for (int c0 = 0; c0 < nchunks; c0 += 32) {
    const int c = c0 + lane;
    norm_rope_step(p, v, c0, c < nchunks ? v4[c] : make_float4(0.f, 0.f, 0.f, 0.f), inv, pp, cs_row);
  }
}

// The block's vectors [v0, v0 + 8) of p: each warp's vector loaded (<= 512 channels), the cos / sin staged, then
// one vector per warp. Block-collective.
__device__ __forceinline__ void norm_rope_block(const HeadNormRopeParams& p, float* x, const int64_t* pos, int64_t v0,
                                                float2* tab) {
  const int lane = threadIdx.x & 31;
  const int64_t vec = v0 + (threadIdx.x >> 5);
  const bool mine = vec < p.rows * p.heads;  // warp-uniform
  const int nchunks = int(p.dim / 4);
  float4 a[kRegSteps];
  const float4* v4 = reinterpret_cast<const float4*>(x + vec * p.dim);
#pragma unroll
  for (int s = 0; s < kRegSteps; ++s)
    a[s] = mine && nchunks <= 32 * kRegSteps && 32 * s + lane < nchunks ? v4[32 * s + lane]
                                                                       : make_float4(0.f, 0.f, 0.f, 0.f);
  const float2* t = stage_cos_sin(p, pos, v0, tab);
  if (mine) norm_rope_vec(p, x, pos, vec, t, v0 / p.heads, a);  // after the barrier
}

// At most 64 registers (4 blocks, 32 warps per SM; unbounded the vector held across the barrier took 66: 3 blocks).
__global__ void __launch_bounds__(32 * kWarpsPerBlock, 4)
    head_norm_rope_kernel(HeadNormRopeParams p, float* x, const int64_t* pos) {
  __shared__ float2 tab[kTabPairs];
  dsinfer::cuda::pdl_wait_then_release();
  norm_rope_block(p, x, pos, int64_t(blockIdx.x) * kWarpsPerBlock, tab);
}

// Blocks [0, blocks_a) take a's vectors, the rest b's.
__global__ void __launch_bounds__(32 * kWarpsPerBlock, 4)
    head_norm_rope_pair_kernel(HeadNormRopeParams a, float* xa, HeadNormRopeParams b, float* xb,
                                           const int64_t* pos, int64_t blocks_a) {
  __shared__ float2 tab[kTabPairs];
  dsinfer::cuda::pdl_wait_then_release();
  if (int64_t(blockIdx.x) < blocks_a) norm_rope_block(a, xa, pos, int64_t(blockIdx.x) * kWarpsPerBlock, tab);
  else norm_rope_block(b, xb, pos, (int64_t(blockIdx.x) - blocks_a) * kWarpsPerBlock, tab);
}
}  // namespace

void launch_head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream) {
  const int64_t blocks = (p.rows * p.heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  dsinfer::cuda::pdl_launch(head_norm_rope_kernel, dim3(unsigned(blocks)), dim3(32 * kWarpsPerBlock), 0,
                            static_cast<cudaStream_t>(stream), p, x, pos);
}

void launch_head_norm_rope_pair(const HeadNormRopeParams& a, float* xa, const HeadNormRopeParams& b, float* xb,
                                const int64_t* pos, void* stream) {
  const int64_t blocks_a = (a.rows * a.heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t blocks_b = (b.rows * b.heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  dsinfer::cuda::pdl_launch(head_norm_rope_pair_kernel, dim3(unsigned(blocks_a + blocks_b)), dim3(32 * kWarpsPerBlock), 0,
                            static_cast<cudaStream_t>(stream), a, xa, b, xb, pos, blocks_a);
}

}  // namespace dsinfer::ops::cuda::detail
