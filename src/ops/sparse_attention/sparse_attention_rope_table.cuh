// The inverse RoPE of a sparse-attention output row from a per-token table in shared memory (session 21, issue 30).
// attn_fp8::out_rope (sparse_attention_fp8_common.cuh) computes the double-precision sincos of pos x inv_freq for
// every output pair of the trailing rope_dim dims of every head: 64 heads x 32 pairs a token on V4-Flash, where only
// rope_dim / 2 = 32 distinct angles exist. Here a block fills the token's rope_dim / 2 (cos, sin) pairs once, by the
// same dev::rope_cos_sin (the same double precision, so the same bits), and the epilogue reads them.
#pragma once
#include "cuda/ops_device.cuh"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"  // SparseAttentionFp8Params

namespace dsinfer::ops::cuda::detail::attn_rope {

// Pairs a table holds at most: the FP8 state's rope_dim is at most the head dim (512, sparse_attention_fp8_cuda.cpp
// refuses more).
constexpr int kMaxPairs = 256;

// Thread `lane` of `threads` fills the pairs whose dims d = dim - rope_dim + 2 j lie in [d_begin, d_end) (the dims
// this caller's epilogue writes) for position pos: table[j] = (cos, sin) of the inverse rotation. The caller
// synchronises before the epilogue reads it and after the last read before the next fill.
__device__ __forceinline__ void fill(const SparseAttentionFp8Params& p, int dim, int64_t pos, int d_begin, int d_end,
                                     int lane, int threads, float2* table) {
  const int pairs = int(p.rope_dim) / 2, rs = dim - int(p.rope_dim);
  for (int j = lane; j < pairs; j += threads) {
    const int d = rs + 2 * j;
    if (d < d_begin || d >= d_end) continue;
    float c, s;
    ::dsinfer::cuda::dev::rope_cos_sin(p.inv_freq[j], pos, p.attention_factor, true, c, s);
    table[j] = make_float2(c, s);
  }
}

// attn_fp8::out_rope's rotation of output pair (a, b) at dim d with the table's angle: the same bits.
__device__ __forceinline__ void apply(float& a, float& b, int d, int dim, const SparseAttentionFp8Params& p,
                                      const float2* table) {
  const int rs = dim - int(p.rope_dim);
  if (p.rope_dim > 0 && d >= rs) {
    const float2 cs = table[(d - rs) / 2];
    ::dsinfer::cuda::dev::rope_rotate(a, b, cs.x, cs.y);
  }
}

}  // namespace dsinfer::ops::cuda::detail::attn_rope
