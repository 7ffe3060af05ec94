// CUDA fused per-head norm + RoPE (see rope_cuda.h). One warp per [dim] vector: pass 1 sums squares (double),
// pass 2 scales and rotates float4 chunks; pairs (2i, 2i+1) never straddle a chunk because dim - rope_dim is
// even and chunks start at multiples of 4. Pass 2 then applies the fused epilogues in registers: the bf16
// rounding of the rotated channels and the FP8 block simulation, whose block amax is a max over the lanes that
// hold the block (fp8_block / 4 consecutive lanes of one 32-chunk step: chunk c = step * 32 + lane covers channels
// [4c, 4c + 4), so a block of B channels is lanes [k B/4, (k+1) B/4) of one step). A max is exact in any order,
// so the result equals fp8_block_sim's bit for bit. The Hadamard epilogue (vectors of <= 128 channels: one step)
// runs the butterflies of dev::smem_hadamard in double registers, stages h < 4 inside a lane and h >= 4 across
// lanes (partner lane ^ h/4), each pair combined by the same a + b / a - b: the same bits as hadamard_fp4_sim.
#include <string>

#include "core/env_switch.h"
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
    const float x = fminf(fmaxf(dev::div_pow2(e[k], s), -qmax), qmax);
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

// Chunk c (channels [4c, 4c + 4)) of vector `vec`: from x (fp32), or from out_bf16 (p.in_bf16; exact widening).
__device__ __forceinline__ float4 load_chunk(const HeadNormRopeParams& p, const float* x, int64_t vec, int c) {
  if (!p.in_bf16) return reinterpret_cast<const float4*>(x + vec * p.dim)[c];
  const uint2 w = reinterpret_cast<const uint2*>(p.out_bf16 + vec * p.dim)[c];
  return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xFFFF0000u), __uint_as_float(w.y << 16),
                     __uint_as_float(w.y & 0xFFFF0000u));
}

// Vector `vec` of p over x. Warp-collective: all 32 lanes call it with the same vec. cs: the row's RoPE (cos, sin)
// per pair, computed once for all its heads or ahead of the PDL wait (head_norm_rope_pair_kernel); null: each pair's
// own rope_cos_sin (the same function of the same inputs, so the same values either way).
__device__ __forceinline__ void norm_rope_vec(const HeadNormRopeParams& p, float* x, const int64_t* pos, int64_t vec,
                                              const float2* cs = nullptr) {
  const int lane = threadIdx.x & 31;
  const int64_t row = vec / p.heads;
  float* v = x + vec * p.dim;
  const int nchunks = int(p.dim / 4);
  float inv = 1.0f;
  if (p.norm != HeadNorm::None) {
    double ss = 0.0;
    for (int c = lane; c < nchunks; c += 32) {
      const float4 a = load_chunk(p, x, vec, c);
      ss = __dadd_rn(ss, dev::sum_sq4(a.x, a.y, a.z, a.w));
    }
    ss = dev::warp_sum(ss);
    inv = dev::rms_inv(ss, p.dim, p.eps);
  }
  const int64_t rope_start = p.dim - p.rope_dim, pp = pos[row];
  const int group = int(p.fp8_block / 4);  // lanes per FP8 block (a power of two <= 32)
  for (int c0 = 0; c0 < nchunks; c0 += 32) {  // warp-uniform steps: the epilogues' shuffles need every lane
    const int c = c0 + lane;
    const bool have = c < nchunks;
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (have) {
      const float4 a = load_chunk(p, x, vec, c);
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
          float c, sn;
          if (cs) {
            c = cs[(d - rope_start) / 2].x;
            sn = cs[(d - rope_start) / 2].y;
          } else {
            dev::rope_cos_sin(p.inv_freq[(d - rope_start) / 2], pp, p.attention_factor, p.inverse, c, sn);
          }
          dev::rope_rotate(e[k], e[k + 1], c, sn);
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
    if (!have) continue;
    if (p.out_bf16) {  // one rounding at the store (RNE: the bits of f32_to_bf16_bits for every non-NaN value)
      const __nv_bfloat162 lo = __floats2bfloat162_rn(e[0], e[1]), hi = __floats2bfloat162_rn(e[2], e[3]);
      uint2 w;
      w.x = *reinterpret_cast<const uint32_t*>(&lo);
      w.y = *reinterpret_cast<const uint32_t*>(&hi);
      reinterpret_cast<uint2*>(p.out_bf16 + vec * p.dim)[c] = w;
    } else {
      reinterpret_cast<float4*>(v)[c] = make_float4(e[0], e[1], e[2], e[3]);
    }
  }
}

// A block's kBlockWarps vectors, warp w vector 8 b + w, when they are heads of one row (heads % kBlockWarps == 0: the
// query's 64): the row's RoPE angles computed once into shared memory for the block, not once a vector (a double sincos
// a pair: with bf16 q the op's largest cost, session 27: 8x fewer). The same values, so the same bits as each warp's
// own rope_cos_sin; the same grid. Where rope_dim / 2 <= kTableMaxPairs.
constexpr int kBlockWarps = 8, kTableMaxPairs = 128;
// HeadNormRopeParams::angle_table (GpuHeadNormRope.AngleTableEqualsPerVectorAngles holds the table to the per-vector
// form bit for bit).
bool table_form(const HeadNormRopeParams& p) {
  static const bool planned = dsinfer::env_switch("DSINFER_ROPE_TABLE", {"0", "1"}) != "0";
  const bool on = p.angle_table < 0 ? planned : p.angle_table > 0;
  return on && p.heads % kBlockWarps == 0 && p.rope_dim / 2 <= kTableMaxPairs;
}

// The (cos, sin) of row `row`'s RoPE pairs into cs, pairs first, first + step, ... (the threads that share the table).
__device__ __forceinline__ void fill_angles(const HeadNormRopeParams& p, const int64_t* pos, int64_t row, float2* cs,
                                            int first, int step) {
  for (int i = first; i < int(p.rope_dim / 2); i += step) {
    float c, sn;
    dev::rope_cos_sin(p.inv_freq[i], pos[row], p.attention_factor, p.inverse, c, sn);
    cs[i] = make_float2(c, sn);
  }
}

// A block of the pair kernel on p's vectors vec0 .. vec0 + 7 (warp w: vec0 + w). block_table: the 8 heads of one row
// share one angle table; else a warp's own vector, through a table of its own where the angles come early. early
// (HeadNormRopeParams::pos_ready): the tables are filled before the PDL wait; the same angles either way.
__device__ __forceinline__ void norm_rope_pair_block(const HeadNormRopeParams& p, float* x, const int64_t* pos,
                                                     int64_t vec0, bool block_table,
                                                     float2 (&cs)[kBlockWarps][kTableMaxPairs]) {
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int64_t vecs = p.rows * p.heads, vec = vec0 + warp;
  const bool early = p.pos_ready && p.rope_dim / 2 <= kTableMaxPairs;
  if (early && block_table && vec0 < vecs) fill_angles(p, pos, vec0 / p.heads, cs[0], int(threadIdx.x), blockDim.x);
  if (early && !block_table && vec < vecs) fill_angles(p, pos, vec / p.heads, cs[warp], lane, 32);
  dsinfer::cuda::pdl_wait_then_release();
  if (block_table) {
    if (vec0 >= vecs) return;  // block-uniform
    if (!early) fill_angles(p, pos, vec0 / p.heads, cs[0], int(threadIdx.x), blockDim.x);
    __syncthreads();
    norm_rope_vec(p, x, pos, vec, cs[0]);
    return;
  }
  if (vec >= vecs) return;  // warp-uniform
  __syncwarp();
  norm_rope_vec(p, x, pos, vec, early ? cs[warp] : nullptr);
}

// Blocks [0, blocks_a) take a's vectors (table_a: each block's 8 heads of one row share an angle table), the rest
// b's (one vector a warp). Each branch names its own parameters (a reference chosen at run time between two kernel
// parameters would copy both to the stack).
__global__ void head_norm_rope_pair_kernel(HeadNormRopeParams a, float* xa, HeadNormRopeParams b, float* xb,
                                           const int64_t* pos, int64_t blocks_a, bool table_a) {
  __shared__ float2 cs[kBlockWarps][kTableMaxPairs];
  if (int64_t(blockIdx.x) < blocks_a) norm_rope_pair_block(a, xa, pos, int64_t(blockIdx.x) * kBlockWarps, table_a, cs);
  else norm_rope_pair_block(b, xb, pos, (int64_t(blockIdx.x) - blocks_a) * kBlockWarps, false, cs);
}
}  // namespace

void launch_head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream) {
  // The pair kernel with nothing in its second half (the block angle table where table_form allows it).
  HeadNormRopeParams none = p;
  none.rows = 0;
  launch_head_norm_rope_pair(p, x, none, x, pos, stream);
}

void launch_head_norm_rope_pair(const HeadNormRopeParams& a, float* xa, const HeadNormRopeParams& b, float* xb,
                                const int64_t* pos, void* stream) {
  const int64_t blocks_a = (a.rows * a.heads + kBlockWarps - 1) / kBlockWarps;
  const int64_t blocks_b = (b.rows * b.heads + kBlockWarps - 1) / kBlockWarps;
  dsinfer::cuda::pdl_launch(head_norm_rope_pair_kernel, dim3(unsigned(blocks_a + blocks_b)), dim3(32 * kBlockWarps), 0,
                            static_cast<cudaStream_t>(stream), a, xa, b, xb, pos, blocks_a, table_form(a));
}

}  // namespace dsinfer::ops::cuda::detail
