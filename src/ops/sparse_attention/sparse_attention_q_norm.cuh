// The split prefill kernel's query norm (session 29, issue 30; sparse_attention_prefill_split.cu, kSplitQNorm): the
// item's raw query (wq_b's bf16 output, 64 heads x 512 dims as TMA wrote it: 8 boxes of 64 heads x 64 dims, 128-byte
// swizzle) normalised and rotated in place in shared memory by head_norm_rope's arithmetic (rope.cu norm_rope_vec
// with in_bf16 and out_bf16, the unweighted norm, the block's angle table), so with its bits. One warp takes 8 heads,
// one at a time, and lane l holds the head's chunks l + 32 k (dims 4 (l + 32 k) ..) as norm_rope_vec's lane l does: the
// double sum of squares over them in that order (dev::sum_sq4), the warp's butterfly sum, dev::rms_inv, the products
// (norm_rope_vec's second product is by the weight 1: the same value), the rotation of the pairs at dims >= 512 -
// rope_dim, one bf16 rounding. The forward rotation's angles are the output's inverse-RoPE table (attn_rope::fill:
// the sine negated, so negated back here, exactly).
#pragma once
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"

namespace dsinfer::ops::cuda::detail::attn_qnorm {

// Heads row0 .. row0 + 7 of the query at q (shared memory, box_bytes apart; 512 dims); rope: the item's inverse-RoPE
// table of the trailing rope_dim dims; eps: the norm's (SparseAttentionFp8Params::q_norm_eps). Warp-collective. Chunk
// ch of row r lies in box ch / 16, in 16-byte unit ((ch % 16) / 2) ^ (r % 8) of the row's 128 bytes, half ch % 2.
// kGroup heads at a time, their dependent chains (the double sums, the butterfly, the double division and square
// root) interleaved: one head at a time cost ~5 us an item on the H100 (session 29). Out of line: its registers do not
// weigh on the kernel's step loop (inlined, the loop spilled).
static __device__ __noinline__ void norm_q(unsigned char* q, uint32_t box_bytes, const float2* rope, int rope_dim,
                                           float eps, int row0, int lane) {
  namespace dev = ::dsinfer::cuda::dev;
  constexpr int kDim = 512, kGroup = 4;
  const int rs = kDim - rope_dim;
#pragma unroll 1
  for (int r0 = row0; r0 < row0 + 8; r0 += kGroup) {
    uint2* at[kGroup][4];
    float e[kGroup][4][4];
    double ss[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int row = r0 + g;
      ss[g] = 0.0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int ch = lane + 32 * k;
        at[g][k] = reinterpret_cast<uint2*>(q + uint32_t(ch >> 4) * box_bytes + uint32_t(row) * 128u +
                                            uint32_t(((((ch & 15) >> 1) ^ (row & 7)) << 4) + ((ch & 1) << 3)));
        const uint2 w = *at[g][k];
        e[g][k][0] = __uint_as_float(w.x << 16);
        e[g][k][1] = __uint_as_float(w.x & 0xFFFF0000u);
        e[g][k][2] = __uint_as_float(w.y << 16);
        e[g][k][3] = __uint_as_float(w.y & 0xFFFF0000u);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int g = 0; g < kGroup; ++g)
        ss[g] = __dadd_rn(ss[g], dev::sum_sq4(e[g][k][0], e[g][k][1], e[g][k][2], e[g][k][3]));
    // dev::warp_sum's butterfly, the heads interleaved (the same order of additions for each)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int g = 0; g < kGroup; ++g) ss[g] += __shfl_xor_sync(dev::kFull, ss[g], o);
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const float inv = dev::rms_inv(ss[g], kDim, eps);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int ch = lane + 32 * k;
#pragma unroll
        for (int j = 0; j < 4; ++j) e[g][k][j] = __fmul_rn(e[g][k][j], inv);
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          const int d = 4 * ch + j;
          if (d >= rs) {
            const float2 cs = rope[(d - rs) / 2];
            dev::rope_rotate(e[g][k][j], e[g][k][j + 1], cs.x, -cs.y);
          }
        }
        const __nv_bfloat162 lo = __floats2bfloat162_rn(e[g][k][0], e[g][k][1]);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(e[g][k][2], e[g][k][3]);
        *at[g][k] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
      }
    }
  }
}

}  // namespace dsinfer::ops::cuda::detail::attn_qnorm
