// The wgmma (sm_90a) building blocks of sparse_attention_fp8.cu's kProbeWgmma loop (session 16). The block's two
// warpgroups each own 256 of the 512 dims (warpgroup g = warps 4g .. 4g + 3; warp w % 4 holds heads 16 (w % 4) .. of
// the accumulators, so every fragment is sparse_attention_mma.cuh's per-warp layout and its softmax, exchange and
// epilogue serve unchanged). Q (64 heads x 512) and a key tile (32 keys x 512) sit in shared memory as bf16 8 x 8 core
// matrices (128 contiguous bytes: 8 rows of 16 bytes, no swizzle): Q's core matrix (head group hg, dim group dg) at (8
// dg + hg) * 128 bytes, a key tile's (key group kg, dim group dg) at (4 dg + kg) * 128. One layout serves both
// products: Q K^T reads the key tile K-major (keys = N), P V reads it MN-major (dims = N, keys = K: the same core
// matrices, transposed by the unit). Descriptor fields (PTX ISA, matrix descriptor): LBO = bytes between core matrices
// adjacent in K, SBO = in M / N.
#pragma once
#include <cstdint>

#include "ops/sparse_attention/sparse_attention_mma.cuh"  // attn_mma::pack_bf16

namespace dsinfer::ops::cuda::detail::attn_wgmma {

// Element offsets (bf16) of (row, dim) in the two tiles.
__device__ __forceinline__ int q_off(int h, int d) { return (((d >> 3) * 8 + (h >> 3)) * 8 + (h & 7)) * 8 + (d & 7); }
__device__ __forceinline__ int k_off(int r, int d) { return (((d >> 3) * 4 + (r >> 3)) * 8 + (r & 7)) * 8 + (d & 7); }

// The sm_90 primitives (cuda/sm90_async.cuh), under this namespace for the kernels that use wg::.
using ::dsinfer::cuda::sm90::fence_proxy_async;
using ::dsinfer::cuda::sm90::wgmma_commit;
using ::dsinfer::cuda::sm90::wgmma_desc;
using ::dsinfer::cuda::sm90::wgmma_fence;
using ::dsinfer::cuda::sm90::wgmma_fence_regs;
using ::dsinfer::cuda::sm90::wgmma_wait;

// s (64 x 32 fp32) += A (64 heads x 16 dims at da) * B (32 keys x 16 dims at db)^T, both K-major; accumulate 0:
// s = A B^T.
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&s)[4][4], uint64_t da, uint64_t db, int accumulate = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]),
        "+f"(s[1][2]), "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]),
        "+f"(s[3][0]), "+f"(s[3][1]), "+f"(s[3][2]), "+f"(s[3][3])
      : "l"(da), "l"(db), "r"(accumulate));
}

// s (64 x 64 fp32: s[j] = keys 8j .. 8j + 7 in the C fragment layout) (+)= A (64 heads x 16 dims, descriptor da)
// * B (64 keys x 16 dims, descriptor db)^T, both K-major; accumulate 0: s = A B^T.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&s)[8][4], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]),
        "+f"(s[1][2]), "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]),
        "+f"(s[3][0]), "+f"(s[3][1]), "+f"(s[3][2]), "+f"(s[3][3]), "+f"(s[4][0]), "+f"(s[4][1]),
        "+f"(s[4][2]), "+f"(s[4][3]), "+f"(s[5][0]), "+f"(s[5][1]), "+f"(s[5][2]), "+f"(s[5][3]),
        "+f"(s[6][0]), "+f"(s[6][1]), "+f"(s[6][2]), "+f"(s[6][3]), "+f"(s[7][0]), "+f"(s[7][1]),
        "+f"(s[7][2]), "+f"(s[7][3])
      : "l"(da), "l"(db), "r"(accumulate));
}

// acc (64 x 256 fp32) += A (64 heads x 16 keys, descriptor da, K-major) * B (16 keys x 256 dims, descriptor db,
// MN-major).
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&acc)[32][4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      :
        "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]),
        "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]),
        "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]),
        "+f"(acc[7][2]), "+f"(acc[7][3]), "+f"(acc[8][0]), "+f"(acc[8][1]), "+f"(acc[8][2]), "+f"(acc[8][3]),
        "+f"(acc[9][0]), "+f"(acc[9][1]), "+f"(acc[9][2]), "+f"(acc[9][3]), "+f"(acc[10][0]), "+f"(acc[10][1]),
        "+f"(acc[10][2]), "+f"(acc[10][3]), "+f"(acc[11][0]), "+f"(acc[11][1]), "+f"(acc[11][2]), "+f"(acc[11][3]),
        "+f"(acc[12][0]), "+f"(acc[12][1]), "+f"(acc[12][2]), "+f"(acc[12][3]), "+f"(acc[13][0]), "+f"(acc[13][1]),
        "+f"(acc[13][2]), "+f"(acc[13][3]), "+f"(acc[14][0]), "+f"(acc[14][1]), "+f"(acc[14][2]), "+f"(acc[14][3]),
        "+f"(acc[15][0]), "+f"(acc[15][1]), "+f"(acc[15][2]), "+f"(acc[15][3]), "+f"(acc[16][0]), "+f"(acc[16][1]),
        "+f"(acc[16][2]), "+f"(acc[16][3]), "+f"(acc[17][0]), "+f"(acc[17][1]), "+f"(acc[17][2]), "+f"(acc[17][3]),
        "+f"(acc[18][0]), "+f"(acc[18][1]), "+f"(acc[18][2]), "+f"(acc[18][3]), "+f"(acc[19][0]), "+f"(acc[19][1]),
        "+f"(acc[19][2]), "+f"(acc[19][3]), "+f"(acc[20][0]), "+f"(acc[20][1]), "+f"(acc[20][2]), "+f"(acc[20][3]),
        "+f"(acc[21][0]), "+f"(acc[21][1]), "+f"(acc[21][2]), "+f"(acc[21][3]), "+f"(acc[22][0]), "+f"(acc[22][1]),
        "+f"(acc[22][2]), "+f"(acc[22][3]), "+f"(acc[23][0]), "+f"(acc[23][1]), "+f"(acc[23][2]), "+f"(acc[23][3]),
        "+f"(acc[24][0]), "+f"(acc[24][1]), "+f"(acc[24][2]), "+f"(acc[24][3]), "+f"(acc[25][0]), "+f"(acc[25][1]),
        "+f"(acc[25][2]), "+f"(acc[25][3]), "+f"(acc[26][0]), "+f"(acc[26][1]), "+f"(acc[26][2]), "+f"(acc[26][3]),
        "+f"(acc[27][0]), "+f"(acc[27][1]), "+f"(acc[27][2]), "+f"(acc[27][3]), "+f"(acc[28][0]), "+f"(acc[28][1]),
        "+f"(acc[28][2]), "+f"(acc[28][3]), "+f"(acc[29][0]), "+f"(acc[29][1]), "+f"(acc[29][2]), "+f"(acc[29][3]),
        "+f"(acc[30][0]), "+f"(acc[30][1]), "+f"(acc[30][2]), "+f"(acc[30][3]), "+f"(acc[31][0]), "+f"(acc[31][1]),
        "+f"(acc[31][2]), "+f"(acc[31][3])
      : "l"(da), "l"(db), "r"(1));
}

// acc (64 x 256 fp32) += A (64 heads x 16 keys: bf16 fragments a, the m16n8k16 A layout per warp) * B (16 keys x 256
// dims at db, MN-major).
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&acc)[32][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      :
        "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]),
        "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]),
        "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]),
        "+f"(acc[7][2]), "+f"(acc[7][3]), "+f"(acc[8][0]), "+f"(acc[8][1]), "+f"(acc[8][2]), "+f"(acc[8][3]),
        "+f"(acc[9][0]), "+f"(acc[9][1]), "+f"(acc[9][2]), "+f"(acc[9][3]), "+f"(acc[10][0]), "+f"(acc[10][1]),
        "+f"(acc[10][2]), "+f"(acc[10][3]), "+f"(acc[11][0]), "+f"(acc[11][1]), "+f"(acc[11][2]), "+f"(acc[11][3]),
        "+f"(acc[12][0]), "+f"(acc[12][1]), "+f"(acc[12][2]), "+f"(acc[12][3]), "+f"(acc[13][0]), "+f"(acc[13][1]),
        "+f"(acc[13][2]), "+f"(acc[13][3]), "+f"(acc[14][0]), "+f"(acc[14][1]), "+f"(acc[14][2]), "+f"(acc[14][3]),
        "+f"(acc[15][0]), "+f"(acc[15][1]), "+f"(acc[15][2]), "+f"(acc[15][3]), "+f"(acc[16][0]), "+f"(acc[16][1]),
        "+f"(acc[16][2]), "+f"(acc[16][3]), "+f"(acc[17][0]), "+f"(acc[17][1]), "+f"(acc[17][2]), "+f"(acc[17][3]),
        "+f"(acc[18][0]), "+f"(acc[18][1]), "+f"(acc[18][2]), "+f"(acc[18][3]), "+f"(acc[19][0]), "+f"(acc[19][1]),
        "+f"(acc[19][2]), "+f"(acc[19][3]), "+f"(acc[20][0]), "+f"(acc[20][1]), "+f"(acc[20][2]), "+f"(acc[20][3]),
        "+f"(acc[21][0]), "+f"(acc[21][1]), "+f"(acc[21][2]), "+f"(acc[21][3]), "+f"(acc[22][0]), "+f"(acc[22][1]),
        "+f"(acc[22][2]), "+f"(acc[22][3]), "+f"(acc[23][0]), "+f"(acc[23][1]), "+f"(acc[23][2]), "+f"(acc[23][3]),
        "+f"(acc[24][0]), "+f"(acc[24][1]), "+f"(acc[24][2]), "+f"(acc[24][3]), "+f"(acc[25][0]), "+f"(acc[25][1]),
        "+f"(acc[25][2]), "+f"(acc[25][3]), "+f"(acc[26][0]), "+f"(acc[26][1]), "+f"(acc[26][2]), "+f"(acc[26][3]),
        "+f"(acc[27][0]), "+f"(acc[27][1]), "+f"(acc[27][2]), "+f"(acc[27][3]), "+f"(acc[28][0]), "+f"(acc[28][1]),
        "+f"(acc[28][2]), "+f"(acc[28][3]), "+f"(acc[29][0]), "+f"(acc[29][1]), "+f"(acc[29][2]), "+f"(acc[29][3]),
        "+f"(acc[30][0]), "+f"(acc[30][1]), "+f"(acc[30][2]), "+f"(acc[30][3]), "+f"(acc[31][0]), "+f"(acc[31][1]),
        "+f"(acc[31][2]), "+f"(acc[31][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// Scores of this warp's 16 heads against the tile's 32 keys over the warpgroup's dims d0 .. d0 + 255 (16 k16 steps);
// s[j] = keys 8j .. 8j + 7 in the C fragment layout (as attn_mma::qk_half). qs, ks: shared addresses of the tiles.
__device__ __forceinline__ void qk_wg(uint32_t qs, uint32_t ks, int d0, float (&s)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
  wgmma_fence_regs(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const uint32_t d = uint32_t(d0 + 16 * kk);
    wgmma_m64n32k16_ss(s, wgmma_desc(qs + d * 128u, 1024u, 128u), wgmma_desc(ks + d * 64u, 512u, 128u));
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
}

// Q K^T of the warpgroup's 64 heads against a key tile over dims d0 .. d0 + 255, issued (16 k16 steps in order, one
// commit group) and left in flight: s must not be read before the group completes. The first step does not
// accumulate (s = Q K^T), so no instruction writes s while a previous tile's P V is in flight, which would make ptxas
// serialise the wgmma; the same sums as qk_wg, which adds the first step to zeros.
__device__ __forceinline__ void qk_issue(uint32_t qs, uint32_t ks, int d0, float (&s)[4][4]) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const uint32_t d = uint32_t(d0 + 16 * kk);
    wgmma_m64n32k16_ss(s, wgmma_desc(qs + d * 128u, 1024u, 128u), wgmma_desc(ks + d * 64u, 512u, 128u), kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

// acc[nt] (dims d0 + 8nt ..) += P V over the tile's 32 keys (two k16 steps); A = P from the score fragments (a0 = keys
// 16kk + 2q4 of row g, as attn_mma::pv_half builds it), B = the key tile MN-major. pv_issue returns with the two
// wgmma in flight (acc must not be touched until pv_wait: the caller dequantises the next tile meanwhile).
// P's two k16 steps as wgmma A fragments (bf16), each register pinned before the wgmma that reads it.
__device__ __forceinline__ void p_fragments(const float (&p)[4][4], uint32_t (&a)[2][4]) {
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const float(&lo)[4] = p[2 * kk];
    const float(&hi)[4] = p[2 * kk + 1];
    a[kk][0] = attn_mma::pack_bf16(lo[0], lo[1]);
    a[kk][1] = attn_mma::pack_bf16(lo[2], lo[3]);
    a[kk][2] = attn_mma::pack_bf16(hi[0], hi[1]);
    a[kk][3] = attn_mma::pack_bf16(hi[2], hi[3]);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[kk][i])::"memory");
  }
}
__device__ __forceinline__ void pv_issue(const float (&p)[4][4], uint32_t ks, int d0, float (&acc)[32][4]) {
  uint32_t a[2][4];
  p_fragments(p, a);
  wgmma_fence_regs(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 2; ++kk)
    wgmma_m64n256k16_rs(acc, a[kk], wgmma_desc(ks + uint32_t(d0) * 64u + uint32_t(kk) * 256u, 128u, 512u));
  wgmma_commit();
}
__device__ __forceinline__ void pv_wait(float (&acc)[32][4]) {
  wgmma_wait<0>();
  wgmma_fence_regs(acc);
}

}  // namespace dsinfer::ops::cuda::detail::attn_wgmma
