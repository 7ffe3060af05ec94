// Device pieces shared by the two kernels of the sparse attention over the FP8 state (sparse_attention_fp8.cu, the
// lock-step kernel, and sparse_attention_fp8_ws.cu, the warp-specialised one): key lookup in the three lists, the
// e4m3 -> bf16 dequantisation of a 16-code chunk, the inverse RoPE of the output and the workspace row shape (the
// combine reads both kernels' partials).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/small_float.h"
#include "cuda/ops_device.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"
#include "ops/sparse_attention/sparse_attention_mma.cuh"  // attn_mma::pack_bf16

namespace dsinfer::ops::cuda::detail::attn_fp8 {

constexpr int kD = int(kKvDim);
constexpr int kPart = kD + 4;  // workspace floats per (token, split, head): o, max, sum, 2 pad (16-byte rows)
constexpr int kData = int(kKvDataBytes);
constexpr int kChunksPerKey = kData / 16;  // 28 code chunks + 8 RoPE chunks

__device__ __forceinline__ int64_t list_len(const Fp8KeySource& s, int64_t t) {
  if (!s.idx) return 0;
  const int64_t n = s.len ? int64_t(s.len[t]) : s.stride;
  return n < 0 ? 0 : (n > s.stride ? s.stride : n);
}

// Cache row of key k of token t (-1: none) and its list `src`: keys[0]'s list, then keys[1]'s, then keys[2]'s (n0,
// n01: the first list's length, the first two's).
__device__ __forceinline__ int64_t key_cache_row(const SparseAttentionFp8Params& p, int64_t t, int64_t n0, int64_t n01,
                                                 int64_t k, int& src) {
  src = k < n0 ? 0 : (k < n01 ? 1 : 2);
  const Fp8KeySource& s = p.keys[src];
  const int64_t j = src == 0 ? k : (src == 1 ? k - n0 : k - n01);
  const int64_t r = s.idx[t * s.stride + j];
  return r >= 0 && r < s.rows ? r : -1;
}

// 16 e4m3 codes times 2^(sb - 127) -> 16 bf16 (exact): the first 8 to lo, the last 8 to hi.
__device__ __forceinline__ void dequant16(const uint4 codes, uint8_t sb, __nv_bfloat16* lo, __nv_bfloat16* hi) {
  const float s = small_float::from_bits(small_float::e8m0_f32_bits(sb));
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t r[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] >> (16 * hh)), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      r[2 * i + hh] = attn_mma::pack_bf16(f.x * s, f.y * s);
    }
  }
  *reinterpret_cast<uint4*>(lo) = make_uint4(r[0], r[1], r[2], r[3]);
  *reinterpret_cast<uint4*>(hi) = make_uint4(r[4], r[5], r[6], r[7]);
}

// Inverse RoPE of the channel pair (d, d+1) of an output head vector at position pos.
__device__ __forceinline__ void out_rope(float& a, float& b, int d, const SparseAttentionFp8Params& p, int64_t pos) {
  const int rs = kD - int(p.rope_dim);
  if (p.rope_dim > 0 && d >= rs) {
    float c, s;
    dsinfer::cuda::dev::rope_cos_sin(p.inv_freq[(d - rs) / 2], pos, p.attention_factor, true, c, s);
    dsinfer::cuda::dev::rope_rotate(a, b, c, s);
  }
}

}  // namespace dsinfer::ops::cuda::detail::attn_fp8
