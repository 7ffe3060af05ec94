// The bf16 mma.sync building blocks of the tensor-core sparse attention kernels (sparse_attention_tc.cu over fp32
// state rows, sparse_attention_fp8.cu over the FP8 storage format): one block holds 64 query heads x 512 and a 32-key
// tile as bf16 in shared memory at a row pitch of kMmaPitch; warp w owns heads 16 (w % 4) .. and dims 256 (w / 4) ..
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), with g = lane / 4 and q4 = lane % 4:
//   A 16x16 (row): a0 = (g, 2q4..+1), a1 = (g+8, 2q4..+1), a2 = (g, 2q4+8..+9), a3 = (g+8, 2q4+8..+9)
//   B 16x8 (col): b0 = (k 2q4..+1, n g), b1 = (k 2q4+8..+9, n g);  C 16x8: c0,c1 = (g, 2q4..+1), c2,c3 = (g+8, ...)
#pragma once
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"

namespace dsinfer::ops::cuda::detail::attn_mma {

namespace dev = dsinfer::cuda::dev;
inline constexpr int kMmaDim = 512;              // head_dim of both kernels
inline constexpr int kMmaPitch = kMmaDim + 8;    // bf16 row pitch (1040 B): rows 4 banks apart, conflict-free
inline constexpr int kMmaHalf = kMmaDim / 2;     // dims a warp owns

using ::dsinfer::cuda::sm90::smem_u32;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  union {
    __nv_bfloat162 v;
    uint32_t u;
  } c;
  c.v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits, the lower column) = lo
  return c.u;
}

__device__ __forceinline__ uint32_t ld_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices, transposed: lanes 8i..8i+7 give the row addresses of matrix i; the thread gets in r[i]
// the elements (rows 2*q4, 2*q4+1; column g) of matrix i.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// Four 8x8 bf16 matrices, not transposed: lanes 8i..8i+7 give the row addresses of matrix i; the thread gets in
// r[i] the elements (row g; columns 2*q4, 2*q4+1) of matrix i.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// Partial scores of heads hr..hr+15 against the tile's 32 keys over dims d0..d0+255; s[j] = C fragment of keys
// 8j..8j+7. Per k16 step three ldmatrix.x4 (12 plain 32-bit loads before session 15, the same elements): A from Q
// rows, matrices (heads +0, dims +0), (+8, +0), (+0, +8), (+8, +8) = a0..a3; B from key rows (row-major keys are
// the col-major B), matrices (keys 8j, dims +0), (8j, +8), (8j + 8, +0), (8j + 8, +8) = b0, b1 of n-tiles j, j + 1.
// Rows 1,040 B apart (4 banks): the 8 rows of a matrix cover the 32 banks, conflict-free.
__device__ __forceinline__ void qk_half(const __nv_bfloat16* qs, const __nv_bfloat16* ks, int hr, int d0,
                                        float (&s)[4][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
  const __nv_bfloat16* qa = qs + (hr + (lane & 7) + ((lane >> 3) & 1) * 8) * kMmaPitch + d0 + (lane >> 4) * 8;
  const __nv_bfloat16* kb = ks + ((lane & 7) + (lane >> 4) * 8) * kMmaPitch + d0 + ((lane >> 3) & 1) * 8;
#pragma unroll 4
  for (int kk = 0; kk < kMmaHalf / 16; ++kk) {
    const int d = 16 * kk;
    uint32_t a[4], b01[4], b23[4];
    ldsm_x4(a, qa + d);
    ldsm_x4(b01, kb + d);
    ldsm_x4(b23, kb + 16 * kMmaPitch + d);
    mma_bf16(s[0], a, b01[0], b01[1]);
    mma_bf16(s[1], a, b01[2], b01[3]);
    mma_bf16(s[2], a, b23[0], b23[1]);
    mma_bf16(s[3], a, b23[2], b23[3]);
  }
}

// Online softmax of one tile for the lane's two rows (r = 0: head g, r = 1: head g+8); on return s holds p
// (rounded to bf16), alpha the factor for the old accumulator. Key of s[j][e]: 8j + 2*q4 + (e & 1); row e >> 1.
__device__ __forceinline__ void softmax_tile(float (&s)[4][4], uint32_t valid, float scale, float (&m)[2],
                                             float (&l)[2], float (&alpha)[2]) {
  const int q4 = threadIdx.x & 3;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * j + 2 * q4 + (e & 1);
      s[j][e] = (valid >> key) & 1u ? s[j][e] * scale : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    }
  float mnew[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // the four lanes of a row are q4 = 0..3 of one g
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 2));
    mnew[r] = fmaxf(m[r], mx[r]);
    alpha[r] = mnew[r] != -INFINITY ? expf(m[r] - mnew[r]) : 1.0f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float p = mnew[r] != -INFINITY ? __bfloat162float(__float2bfloat16_rn(expf(s[j][e] - mnew[r]))) : 0.0f;
      s[j][e] = p;
      sum[r] += p;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(dev::kFull, sum[r], 1);
    sum[r] += __shfl_xor_sync(dev::kFull, sum[r], 2);
    l[r] = l[r] * alpha[r] + sum[r];
    m[r] = mnew[r];
  }
}

// The online softmax's rescale of the output accumulators: rows g (elements 0, 1) by alpha[0], rows g + 8 (2, 3) by
// alpha[1].
template <int N>
__device__ __forceinline__ void rescale_rows(float (&acc)[N][4], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < N; ++nt) {
    acc[nt][0] *= alpha[0];
    acc[nt][1] *= alpha[0];
    acc[nt][2] *= alpha[1];
    acc[nt][3] *= alpha[1];
  }
}

// acc[nt] (dims d0 + 8nt ..) += P V over the tile's 32 keys (two k16 steps). A = P from the score fragments:
// a0 = tile 2kk (c0, c1), a1 = tile 2kk (c2, c3), a2 / a3 the same of tile 2kk+1. B by ldmatrix.x4.trans of key
// rows: matrices (keys +0, dims +0), (keys +8, dims +0), (keys +0, dims +8), (keys +8, dims +8) give b0, b1 of
// n-tile 2np and b0, b1 of n-tile 2np+1.
__device__ __forceinline__ void pv_half(const float (&p)[4][4], const __nv_bfloat16* ks, int d0, float (&acc)[32][4]) {
  const int lane = threadIdx.x & 31, mi = lane >> 3;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const float(&lo)[4] = p[2 * kk];
    const float(&hi)[4] = p[2 * kk + 1];
    const uint32_t a[4] = {pack_bf16(lo[0], lo[1]), pack_bf16(lo[2], lo[3]), pack_bf16(hi[0], hi[1]),
                           pack_bf16(hi[2], hi[3])};
    const __nv_bfloat16* base = ks + (16 * kk + (lane & 7) + (mi & 1) * 8) * kMmaPitch + d0 + (mi >> 1) * 8;
#pragma unroll
    for (int np = 0; np < 16; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b, base + 16 * np);
      mma_bf16(acc[2 * np], a, b[0], b[1]);
      mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// Epilogue of one warp: rows hr + g (+8), dims d0 + 8nt + 2q4 (+1). `normalise` (one split): divide by the sum with
// the sink, pass each pair through finish(e0, e1, d) (the inverse RoPE) and write o (rows of `dim` floats). Else the
// unnormalised partial (rows of `part_stride` floats) and (max, sum) after its dims, written once by the dims-0 warp,
// for the combine kernel.
template <int N, class Finish>
__device__ __forceinline__ void write_rows(const float (&acc)[N][4], const float (&m)[2], const float (&l)[2],
                                           int64_t hr, int d0, int64_t t, int64_t split, int64_t heads, int64_t splits,
                                           int64_t dim, int64_t part_stride, bool normalise, const float* sinks,
                                           float* o, float* ws, Finish finish) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = hr + g + 8 * r;
    if (h >= heads) continue;
    if (normalise) {
      const float sink = sinks[h], M = fmaxf(m[r], sink);
      const float em = expf(m[r] - M);
      const float f = em / (l[r] * em + expf(sink - M));
      float* orow = o + (t * heads + h) * dim;
#pragma unroll
      for (int nt = 0; nt < N; ++nt) {
        const int d = d0 + 8 * nt + 2 * q4;
        float e0 = acc[nt][2 * r] * f;
        float e1 = acc[nt][2 * r + 1] * f;
        finish(e0, e1, d);
        *reinterpret_cast<float2*>(orow + d) = make_float2(e0, e1);
      }
    } else {
      float* part = ws + ((t * splits + split) * heads + h) * part_stride;
#pragma unroll
      for (int nt = 0; nt < N; ++nt) {
        const int d = d0 + 8 * nt + 2 * q4;
        *reinterpret_cast<float2*>(part + d) = make_float2(acc[nt][2 * r], acc[nt][2 * r + 1]);
      }
      if (d0 == 0 && q4 == 0) {
        part[dim] = m[r];
        part[dim + 1] = l[r];
      }
    }
  }
}

}  // namespace dsinfer::ops::cuda::detail::attn_mma
