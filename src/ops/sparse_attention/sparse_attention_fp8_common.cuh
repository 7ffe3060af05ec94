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

// 16 e4m3 codes times 2^(sb - 127) -> 16 bf16 (exact) as 8 bf16 pairs (r[0..3]: the first 8, r[4..7] the last 8);
// dequant16 stores them: the first 8 to lo, the last 8 to hi.
__device__ __forceinline__ void dequant16_bits(const uint4 codes, uint8_t sb, uint32_t (&r)[8]) {
  const float s = small_float::from_bits(small_float::e8m0_f32_bits(sb));
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w[i] >> (16 * hh)), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      r[2 * i + hh] = attn_mma::pack_bf16(f.x * s, f.y * s);
    }
  }
}
__device__ __forceinline__ void dequant16(const uint4 codes, uint8_t sb, __nv_bfloat16* lo, __nv_bfloat16* hi) {
  uint32_t r[8];
  dequant16_bits(codes, sb, r);
  *reinterpret_cast<uint4*>(lo) = make_uint4(r[0], r[1], r[2], r[3]);
  *reinterpret_cast<uint4*>(hi) = make_uint4(r[4], r[5], r[6], r[7]);
}

// dequant16's bits with no conversion instruction (session 18): a code's sign and its 7 exponent-mantissa bits placed
// as a bf16 (sign << 15 | (code & 0x7f) << 4) is the e4m3 value times 2^-120 exactly, normal codes and subnormal ones
// alike (bf16 keeps 7 mantissa bits, e4m3 3), so one bf16 multiply by 2^(sb - 7) gives the product rounded once to
// bf16: the exact e4m3 * 2^(sb - 127), as dequant16 rounds it. Exact while 2^(sb - 7) is a bf16 normal (sb <= 134;
// the state's scales are near 127); larger scale bytes and chunks holding a NaN code (e4m3 0x7f / 0xff: the fast
// form would give a finite value) take dequant16. Per pair of codes: 2 byte permutes, a shift, a logic op and a
// multiply, against dequant16's 3 conversions, 2 multiplies and a pack. The GPU test checks every (code, scale)
// byte pair against dequant16 bit for bit. dequant16_fast_ok: false for the chunks that must take dequant16;
// dequant16_fast_pairs: the 8 pairs (as dequant16_bits) of a chunk that may take the fast form. dequant16_fast stores
// them or takes dequant16 (the one-block kernel's producer); dequant16_fast_bits gives them and true, or false (the
// pair's producer, which writes each pair twice).
__device__ __forceinline__ bool dequant16_fast_ok(const uint4 codes, uint8_t sb) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t nan = 0;  // bit 7 of a byte set: that code's low 7 bits were all ones
#pragma unroll
  for (int i = 0; i < 4; ++i) nan |= (w[i] & 0x7f7f7f7fu) + 0x01010101u;
  return !((nan & 0x80808080u) != 0 || sb > 134);
}
__device__ __forceinline__ void dequant16_fast_pairs(const uint4 codes, uint8_t sb, uint32_t (&r)[8]) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  const uint32_t c16 = (uint32_t(sb) + 120u) << 7;  // bf16 bits of 2^(sb - 7)
  const uint32_t c = c16 | (c16 << 16);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t m = w[i] & 0x7f7f7f7fu;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      // Codes 2hh, 2hh + 1 of the word: magnitudes to bits 4.. of each half, signs to bit 15 of each half.
      const uint32_t mag = __byte_perm(m, 0u, hh ? 0x4342u : 0x4140u) << 4;
      const uint32_t sgn = __byte_perm(w[i], 0u, hh ? 0x3424u : 0x1404u) & 0x80008000u;
      const uint32_t raw = sgn | mag;
      uint32_t out;
      asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out) : "r"(raw), "r"(c));
      r[2 * i + hh] = out;
    }
  }
}
// Session 18's control flow (the check, dequant16 and return, else the fast form and the stores): session 19 routed
// it through dequant16_fast_bits, which gives the same bits but made the one-block kernel's code ~2 % slower (bench/
// NOTES.md, session 21 helper s21-sparsed).
__device__ __forceinline__ void dequant16_fast(const uint4 codes, uint8_t sb, __nv_bfloat16* lo, __nv_bfloat16* hi) {
  if (!dequant16_fast_ok(codes, sb)) {
    dequant16(codes, sb, lo, hi);
    return;
  }
  uint32_t r[8];
  dequant16_fast_pairs(codes, sb, r);
  *reinterpret_cast<uint4*>(lo) = make_uint4(r[0], r[1], r[2], r[3]);
  *reinterpret_cast<uint4*>(hi) = make_uint4(r[4], r[5], r[6], r[7]);
}
__device__ __forceinline__ bool dequant16_fast_bits(const uint4 codes, uint8_t sb, uint32_t (&r)[8]) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t nan = 0;  // bit 7 of a byte set: that code's low 7 bits were all ones
#pragma unroll
  for (int i = 0; i < 4; ++i) nan |= (w[i] & 0x7f7f7f7fu) + 0x01010101u;
  if ((nan & 0x80808080u) != 0 || sb > 134) return false;
  dequant16_fast_pairs(codes, sb, r);
  return true;
}

// Dims 8 c8 .. 8 c8 + 7 of head h of token t's q ([T, H, 512]) as 8 bf16 (fp32 q rounded, bf16 q as is); zeros for
// h >= H (a partial head group). Both kernels' Q loaders.
template <bool kBf16>
__device__ __forceinline__ uint4 q_chunk(const void* q, int64_t t, int64_t h, int64_t H, int c8) {
  if (h >= H) return make_uint4(0, 0, 0, 0);
  if (kBf16) return __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(q) + (t * H + h) * kD) + c8);
  const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(q) + (t * H + h) * kD) + 2 * c8;
  const float4 a = __ldg(src), b = __ldg(src + 1);
  return make_uint4(attn_mma::pack_bf16(a.x, a.y), attn_mma::pack_bf16(a.z, a.w), attn_mma::pack_bf16(b.x, b.y),
                    attn_mma::pack_bf16(b.z, b.w));
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
