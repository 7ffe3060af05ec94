// Fast (decode) MoE expert kernels for FP4_G32 experts with E8M0 scales (see moe_fast_common.h for the fragment
// layout and docs/kernels.md "MoE fast path"). Grid: x = weight-row tile, y = slot in the list of touched experts
// (blocks past the list's length exit), so every touched expert's weights are streamed once per pass of 8 tokens.
// Block: 8 warps split K in 128-k chunks (warp w takes chunks w, w+8, ...), each warp holds 4 m16 weight tiles
// x 8 tokens of fp32 accumulators; the warps' partial sums are added in warp order in shared memory (deterministic,
// no atomics). The gate/up kernel reads its B operand from x's bf16 token rows through perm_token.
// Gate/up kernel: tiles W1 rows n0..n0+31 and W3 rows n0..n0+31, epilogue = clamped SwiGLU -> bf16 (pair layout,
// the B operand of the down kernel). Down kernel: W2 rows n0..n0+63, epilogue = fp32 rows of yp.
// The shared expert (moe_fast_shared.h) rides in the same launches: grid rows y < ceil(T / 8) stream its FP8 weights
// for tokens 8y..8y+7 (shared_block: same tiles, warps and reduction; each 128-k chunk in two halves of 16 bytes per
// row, decoded by e4m3_pair_bits and one E8M0 factor per chunk and matrix), the routed experts' slots follow.
// FP4 decode (kVariant, MoeFastVariant): each word's four bf16 pairs at once (fp4_word_pairs; session 23), or pair by
// pair (fp4_pair_bits; session 18, DSINFER_MOE_FAST_VARIANT=0). The same operands, so the same bits.
// The paired kernel (MoeFastArgs::big, session 36): the experts with more than 8 rows in a second launch, 16 of their
// rows a pass (each decoded weight fragment feeds two n8 mmas; 2 blocks an SM), instead of a pass of 8 rows per
// 8 tokens streaming and decoding the tile again; the same mmas per token, so the same bits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pdl.cuh"
#include "ops/moe/moe_fast_common.h"
#include "ops/moe/moe_fast_shared.h"
#include "ops/moe/moe_launch.h"
#include "ops/moe/moe_x_bf16.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace md = ::dsinfer::ops::moe_detail;
using md::kFastChunk;
using md::kFastThreads;
using md::kFastTiles;
using md::kFastTokens;
using md::kFastWarps;

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// bf16x2 multiply (exact here: power-of-two factor, results in the normal range).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a), y = *reinterpret_cast<__nv_bfloat162*>(&b);
  __nv_bfloat162 r = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&r);
}

// One warp step's global data: per tile, rows g and g+8 (16 bytes of FP4 each + their scale byte), and, per group of
// 8 tokens of the pass, the lane's 64 bytes of B (token g of the group; zero past the expert's rows).
template <int kGroups>
struct Chunk {
  uint4 w[kFastTiles][2];
  uint32_t s[kFastTiles][2];
  uint4 x[kGroups][4];
};

// Weight rows of the block: matrix m (0: W1 or W2, 1: W3) at row n0 + g; tile a's rows g / g+8 are
// at (row_of(a) + 8r) rows further.
struct TileRows {
  const uint8_t* data[2];
  const uint8_t* scale[2];
  int64_t data_row, scale_row;  // bytes per row: K/2 and K/32
};

// Activations of the lane: 32 k of the chunk from the bf16 pair-layout row xb (zeros without one).
__device__ __forceinline__ void load_x(const uint16_t* xb, int ch, int t, uint4 (&x)[4]) {
  const uint4* p = reinterpret_cast<const uint4*>(xb + ch * kFastChunk + t * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = xb ? __ldg(p + i) : make_uint4(0, 0, 0, 0);
}

// load_x's slots 2h and 2h + 1 only (the shared expert's half chunk: elements 16h..16h+15 of the lane's 32).
__device__ __forceinline__ void load_x_half(const uint16_t* xb, int ch, int t, int h, uint4 (&x)[2]) {
  const uint4* p = reinterpret_cast<const uint4*>(xb + ch * kFastChunk + t * 32);
#pragma unroll
  for (int j = 0; j < 2; ++j) x[j] = xb ? __ldg(p + 2 * h + j) : make_uint4(0, 0, 0, 0);
}

// Weight matrix of tile a (0: W1 or W2, 1: W3) and its row half r's offset from the lane's row g.
template <bool kGateUp>
__device__ __forceinline__ int tile_matrix(int a) { return kGateUp ? (a >> 1) : 0; }
template <bool kGateUp>
__device__ __forceinline__ int tile_row(int a, int r) { return (kGateUp ? 16 * (a & 1) : 16 * a) + 8 * r; }

// kK: K known at compile time (0: tr's row strides): the rows' offsets are then load immediates.
template <bool kGateUp, int kK, int kGroups>
__device__ __forceinline__ void load_chunk(const TileRows& tr, int ch, int t, Chunk<kGroups>& c) {
  const int64_t data_row = kK ? kK / 2 : tr.data_row, scale_row = kK ? kK / 32 : tr.scale_row;
#pragma unroll
  for (int a = 0; a < kFastTiles; ++a)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int m = tile_matrix<kGateUp>(a), row = tile_row<kGateUp>(a, r);
      c.w[a][r] = __ldg(reinterpret_cast<const uint4*>(tr.data[m] + row * data_row + ch * (kFastChunk / 2) + t * 16));
      c.s[a][r] = __ldg(tr.scale[m] + row * scale_row + ch * (kFastChunk / 32) + t);
    }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; }

// kWordDecode (MoeFastVariant::kWordDecode): each FP4 word's four pairs by fp4_word_pairs (11 integer operations);
// else one fp4_pair_bits per pair (session 18). kScalePair: the scale factors by fp4_scale_bf16x2 (4 operations
// instead of 7; in the down kernel only: in the gate/up kernel it made ptxas spill an address register, reloaded
// before every chunk's loads). The same operands either way, so the same bits. kGroups = 2 (the paired kernel, word
// decode only): each decoded A fragment feeds the mmas of both groups of 8 tokens, each accumulator the same mmas in
// the same order as with one group.
template <bool kWordDecode, bool kScalePair, int kGroups>
__device__ __forceinline__ void compute_chunk(const Chunk<kGroups>& c, float (&acc)[kGroups][kFastTiles][4]) {
  static_assert(kGroups == 1 || kWordDecode, "the paired kernel has the word decode only");
#pragma unroll
  for (int a = 0; a < kFastTiles; ++a) {
    uint32_t F0, F1;
    if constexpr (kScalePair) {
      F0 = md::fp4_scale_bf16x2(c.s[a][0]);
      F1 = md::fp4_scale_bf16x2(c.s[a][1]);
    } else {
      const uint32_t f0 = md::fp4_scale_bf16(c.s[a][0]), f1 = md::fp4_scale_bf16(c.s[a][1]);
      F0 = f0 | (f0 << 16);
      F1 = f1 | (f1 << 16);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t w0 = word(c.w[a][0], q), w1 = word(c.w[a][1], q);
      if constexpr (kWordDecode) {
        uint32_t p0[4], p1[4];
        md::fp4_word_pairs(w0, p0);
        md::fp4_word_pairs(w1, p1);
        // k-step 2q: pairs 0 / 1 of the word (A registers a0..a3); k-step 2q + 1: pairs 2 / 3
        const uint32_t lo[4] = {bf16x2_mul(p0[0], F0), bf16x2_mul(p1[0], F1), bf16x2_mul(p0[1], F0),
                                bf16x2_mul(p1[1], F1)};
        const uint32_t hi[4] = {bf16x2_mul(p0[2], F0), bf16x2_mul(p1[2], F1), bf16x2_mul(p0[3], F0),
                                bf16x2_mul(p1[3], F1)};
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          const uint4& xb = c.x[g][q];
          mma_bf16(acc[g][a], lo[0], lo[1], lo[2], lo[3], xb.x, xb.y);
          mma_bf16(acc[g][a], hi[0], hi[1], hi[2], hi[3], xb.z, xb.w);
        }
        continue;
      }
      const uint4& xb = c.x[0][q];
      // k-step 2q: pairs 4q (cols 2t..) and 4q+1 (cols 2t+8..); k-step 2q+1: pairs 4q+2 and 4q+3.
      mma_bf16(acc[0][a], bf16x2_mul(md::fp4_pair_bits(w0, 0), F0), bf16x2_mul(md::fp4_pair_bits(w1, 0), F1),
               bf16x2_mul(md::fp4_pair_bits(w0, 1), F0), bf16x2_mul(md::fp4_pair_bits(w1, 1), F1), xb.x, xb.y);
      mma_bf16(acc[0][a], bf16x2_mul(md::fp4_pair_bits(w0, 2), F0), bf16x2_mul(md::fp4_pair_bits(w1, 2), F1),
               bf16x2_mul(md::fp4_pair_bits(w0, 3), F0), bf16x2_mul(md::fp4_pair_bits(w1, 3), F1), xb.z, xb.w);
    }
  }
}

// Sum of the 8 warps' partials (warp order) of tile a, C element j, lane l; back to the true scale.
__device__ __forceinline__ float reduced(const float* red, int a, int row16, int tok) {
  const int g = row16 & 7, j = 2 * (row16 >> 3) + (tok & 1), lane = 4 * g + (tok >> 1);
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kFastWarps; ++w) s += red[((w * kFastTiles + a) * 4 + j) * 32 + lane];
  return s * 0x1p64f;  // 2^kFastScaleShift
}
static_assert(md::kFastScaleShift == 64, "reduced() multiplies by 2^64");
static_assert(kFastThreads == md::kFastGateRows * kFastTokens, "gate/up epilogue: one thread per (row, token)");

// The pass's outputs from the reduction buffer: tokens 0..valid-1 of the pass (valid may exceed 8) to output rows
// orow + tok. Gate/up: clamped SwiGLU to bf16 pair layout in hout [rows, N]; down: fp32 rows of yout [rows, N].
template <bool kGateUp>
__device__ __forceinline__ void store_pass(const float* red, int64_t n0, int64_t N, int64_t orow, int valid,
                                           float limit, uint16_t* hout, float* yout) {
  if constexpr (kGateUp) {
    // 256 threads = 32 rows x 8 tokens; the 32 rows are one pair-layout group of h.
    const int r = threadIdx.x >> 3, tok = threadIdx.x & 7;
    if (tok < valid) {
      float gv = reduced(red, r >> 4, r & 15, tok), uv = reduced(red, 2 + (r >> 4), r & 15, tok);
      if (limit > 0.0f) {
        gv = fminf(gv, limit);
        uv = fminf(fmaxf(uv, -limit), limit);
      }
      const float h = gv / (1.0f + expf(-gv)) * uv;
      hout[(orow + tok) * N + n0 + md::pair_dst(r)] = __bfloat16_as_ushort(__float2bfloat16_rn(h));
    }
  } else {
    const int rows = md::kFastDownRows;
    for (int i = threadIdx.x; i < rows * kFastTokens; i += kFastThreads) {
      const int r = i % rows, tok = i / rows;
      if (tok < valid) yout[(orow + tok) * N + n0 + r] = reduced(red, r >> 4, r & 15, tok);
    }
  }
}

__device__ __forceinline__ void store_partials(float* red, int warp, int lane, const float (&acc)[kFastTiles][4]) {
#pragma unroll
  for (int a = 0; a < kFastTiles; ++a)
#pragma unroll
    for (int j = 0; j < 4; ++j) red[((warp * kFastTiles + a) * 4 + j) * 32 + lane] = acc[a][j];
}

// The shared expert's block (grid row y < ceil(sh.rows / 8)): its tokens 8y..8y+7 against FP8 rows n0.. of W1 / W3
// (gate/up) or W2 (down). Lane t's 32 k of a chunk are 32 bytes per row, read in two halves of 16 (h): half h holds
// the lane's words q = 2h, 2h+1 of the FP4 layout (elements 8q..8q+7), whose B operand is x slot q. The block's rows
// lie in one 128-row scale block, so one E8M0 byte per chunk and matrix scales every weight of the chunk.
template <bool kGateUp>
__device__ __forceinline__ void shared_block(const MoeFastArgs& p, const MoeFastShared& sh, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rows = kGateUp ? md::kFastGateRows : md::kFastDownRows;
  const int64_t n0 = int64_t(blockIdx.x) * rows;
  const int64_t K = p.K, nch = K / kFastChunk;
  const int pass = int(blockIdx.y) * kFastTokens;
  const bool has_row = pass + g < sh.rows;
  // gate/up: x's token rows; down: h's rows after the routed experts' (row0)
  const uint16_t* xrow = has_row ? p.xb + ((kGateUp ? 0 : sh.row0) + pass + g) * K : nullptr;
  const uint8_t* wd[2];
  const uint8_t* ws[2];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const bool up = kGateUp && m == 1;
    wd[m] = static_cast<const uint8_t*>(up ? sh.w3 : sh.w1) + (n0 + g) * K;
    ws[m] = static_cast<const uint8_t*>(up ? sh.s3 : sh.s1) + (n0 / 128) * (K / 128);
  }
  float acc[kFastTiles][4] = {};
  for (int64_t ch = warp; ch < nch; ch += kFastWarps) {
    uint32_t F[2];
#pragma unroll
    for (int m = 0; m < (kGateUp ? 2 : 1); ++m) {
      const uint32_t f = md::e4m3_scale_bf16(__ldg(ws[m] + ch));
      F[m] = f | (f << 16);
    }
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {  // not unrolled: one half's 32 weight registers live at a time
      uint4 w[kFastTiles][2], xh[2];
      load_x_half(xrow, int(ch), t, h, xh);
#pragma unroll
      for (int a = 0; a < kFastTiles; ++a)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          w[a][r] = __ldg(reinterpret_cast<const uint4*>(wd[tile_matrix<kGateUp>(a)] + tile_row<kGateUp>(a, r) * K +
                                                         ch * kFastChunk + t * 32 + 16 * h));
#pragma unroll
      for (int a = 0; a < kFastTiles; ++a) {
        const uint32_t Fa = F[kGateUp ? (a >> 1) : 0];
#pragma unroll
        for (int qq = 0; qq < 2; ++qq) {
          const uint32_t w0a = word(w[a][0], 2 * qq), w0b = word(w[a][0], 2 * qq + 1);
          const uint32_t w1a = word(w[a][1], 2 * qq), w1b = word(w[a][1], 2 * qq + 1);
          const uint4& xb = xh[qq];
          mma_bf16(acc[a], bf16x2_mul(md::e4m3_pair_bits(w0a, w0b, 0), Fa),
                   bf16x2_mul(md::e4m3_pair_bits(w1a, w1b, 0), Fa), bf16x2_mul(md::e4m3_pair_bits(w0a, w0b, 1), Fa),
                   bf16x2_mul(md::e4m3_pair_bits(w1a, w1b, 1), Fa), xb.x, xb.y);
          mma_bf16(acc[a], bf16x2_mul(md::e4m3_pair_bits(w0a, w0b, 2), Fa),
                   bf16x2_mul(md::e4m3_pair_bits(w1a, w1b, 2), Fa), bf16x2_mul(md::e4m3_pair_bits(w0a, w0b, 3), Fa),
                   bf16x2_mul(md::e4m3_pair_bits(w1a, w1b, 3), Fa), xb.z, xb.w);
        }
      }
    }
  }
  store_partials(red, warp, lane, acc);
  __syncthreads();
  const int valid = int(sh.rows) - pass;
  if constexpr (kGateUp) store_pass<true>(red, n0, p.N, sh.row0 + pass, valid, sh.limit, p.hout, nullptr);
  else store_pass<false>(red, n0, p.N, pass, valid, 0.0f, nullptr, sh.out);
}

constexpr int kRedFloats = kFastWarps * kFastTiles * 4 * 32;  // the reduction buffer of one group of 8 tokens

// An expert's rows against the block's weight rows n0..: passes of kGroups x 8 of its tokens. kVariant:
// MoeFastVariant (0: session 18's decode, 1: the word decode). kK: p.K fixed at compile time (0: any K;
// launch_variant's choice). kGroups = 2 (the paired kernel): one decoded weight fragment for both groups' mmas, each
// token's accumulators the same mmas, sums and epilogue as with one group, so the same bits; red holds kGroups
// reduction buffers.
template <bool kGateUp, int kVariant, int kK, int kGroups>
__device__ __forceinline__ void expert_passes(const MoeFastArgs& p, int e, float* red) {
  const int rb = p.offsets[e], cnt = p.offsets[e + 1] - rb;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rows = kGateUp ? md::kFastGateRows : md::kFastDownRows;
  const int64_t n0 = int64_t(blockIdx.x) * rows;
  const int64_t K = kK ? kK : p.K, nch = K / kFastChunk;

  TileRows tr;
  tr.data_row = K / 2;
  tr.scale_row = K / 32;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const bool up = kGateUp && m == 1;
    tr.data[m] = static_cast<const uint8_t*>(up ? p.w3[e] : p.w1[e]) + (n0 + g) * tr.data_row;
    tr.scale[m] = static_cast<const uint8_t*>(up ? p.s3[e] : p.s1[e]) + (n0 + g) * tr.scale_row;
  }

  for (int pass = 0; pass < cnt; pass += kGroups * kFastTokens) {
    const uint16_t* xrow[kGroups];
#pragma unroll
    for (int gr = 0; gr < kGroups; ++gr) {
      const int r = pass + gr * kFastTokens + g;
      const bool has_row = r < cnt;
      // gate/up: x's token row of permuted row rb + r; down: h's permuted row
      const int64_t brow = !has_row ? 0 : kGateUp ? int64_t(p.perm[rb + r]) : int64_t(rb) + r;
      xrow[gr] = has_row ? p.xb + brow * K : nullptr;
    }
    float acc[kGroups][kFastTiles][4] = {};
    // One chunk loaded per warp at a time (4 KB); 3 blocks = 24 warps per SM. Measured on the H200 (2026-11-30):
    // 3 blocks/SM at 80 registers beat 2 blocks/SM by 10-25 %, and a 2-stage cp.async ring per warp (2 blocks/SM
    // by shared memory) was no faster: the FP4 decode's ALU work is the other limit. An L2 prefetch of each warp's
    // next 3 chunks (2026-12-01) made every T slower (H200: T = 1 / 64 / 256 routed 54 / 991 / 1310 us without,
    // 73 / 1368 / 1861 us with) and was removed. 16 rows per pass for every expert (one decoded weight fragment for
    // two n8 mmas, 126-128 registers, 2 blocks/SM; session 15) gave the same bits and was slower at every T (T = 64 /
    // 256 gate/up 665 / 925 us against 545 / 843) and was removed; two passes at once within 80 registers (session
    // 22, branch s22-moed 3e5802f) was slower at every T too, the experts without a second pass included: its
    // registers made ptxas spill addresses that this loop then reloads before each chunk's weight loads (T = 64 /
    // 256 gate/up 632 / 933 us against 550 / 858). Hence the paired kernel of its own (kGroups = 2, 2 blocks/SM)
    // for the experts with more than 8 rows only (session 36), this loop unchanged for the others.
    for (int64_t ch = warp; ch < nch; ch += kFastWarps) {
      Chunk<kGroups> c;
      load_chunk<kGateUp, kK>(tr, int(ch), t, c);
#pragma unroll
      for (int gr = 0; gr < kGroups; ++gr) load_x(xrow[gr], int(ch), t, c.x[gr]);
      compute_chunk<kVariant == 1, kVariant == 1 && !kGateUp>(c, acc);
    }
#pragma unroll
    for (int gr = 0; gr < kGroups; ++gr) store_partials(red + gr * kRedFloats, warp, lane, acc[gr]);
    __syncthreads();
#pragma unroll
    for (int gr = 0; gr < kGroups; ++gr) {
      const int first = pass + gr * kFastTokens;  // valid <= 0: nothing to store
      store_pass<kGateUp>(red + gr * kRedFloats, n0, p.N, int64_t(rb) + first, cnt - first, p.limit, p.hout, p.yout);
    }
    __syncthreads();  // red is rewritten by the next pass
  }
}

// The single-pass kernel: grid rows y < ceil(sh.rows / 8) take the shared expert, then one touched expert a row
// (those of p.big left to the paired kernel).
template <bool kGateUp, int kVariant, int kK>
__global__ void __launch_bounds__(kFastThreads, 3) moe_fast_kernel(MoeFastArgs p, MoeFastShared sh) {
  __shared__ float red[kRedFloats];
  dsinfer::cuda::pdl_wait_then_release();
  const int shared_slots = int((sh.rows + kFastTokens - 1) / kFastTokens);
  if (int(blockIdx.y) < shared_slots) {
    shared_block<kGateUp>(p, sh, red);
    return;
  }
  const int slot = int(blockIdx.y) - shared_slots;
  if (slot >= p.active[0]) return;
  const int e = p.active[1 + slot];
  if (p.big && p.offsets[e + 1] - p.offsets[e] > kFastTokens) return;  // the paired kernel's
  expert_passes<kGateUp, kVariant, kK, 1>(p, e, red);
}

// The paired kernel (word decode): the experts of p.big, 16 of their rows a pass; grid row y takes list slots y,
// y + gridDim.y, ... 2 blocks an SM (its 32 accumulators and two groups' B need ~128 registers).
template <bool kGateUp, int kK>
__global__ void __launch_bounds__(kFastThreads, 2) moe_fast_paired_kernel(MoeFastArgs p) {
  __shared__ float red[2 * kRedFloats];
  dsinfer::cuda::pdl_wait_then_release();
  const int count = p.big[0];
  for (int slot = int(blockIdx.y); slot < count; slot += int(gridDim.y))
    expert_passes<kGateUp, 1, kK, 2>(p, p.big[1 + slot], red);
}

// x's token rows to the gate/up kernel's bf16 B operand (moe_x_bf16.cuh): block = one row.
__global__ void moe_x_bf16_kernel(MoeXBf16 xc) { moe_x_bf16_row(xc.x, blockIdx.x, xc.K, xc.xb); }

}  // namespace

void launch_moe_x_bf16(const MoeXBf16& xc, void* stream) {
  moe_x_bf16_kernel<<<unsigned(xc.T), 256, 0, static_cast<cudaStream_t>(stream)>>>(xc);
}

namespace {
// The word decode's down kernel at V4-Flash's inter (K = 2,048) runs with K fixed at compile time: the weight rows'
// offsets become load immediates (the chunk loop 626 -> 608 instructions). The gate/up kernel at K = 4,096 would too
// (646 -> 620) but spills its weight bases there (reloaded before every chunk), so it stays on any K. Same bits.
constexpr int kFlashDownK = 2048;
template <int kVariant>
void launch_variant(bool gate_up, const MoeFastArgs& a, const MoeFastShared& s, dim3 grid, cudaStream_t st) {
  using dsinfer::cuda::pdl_launch;
  const dim3 block(kFastThreads);
  if (gate_up) {
    pdl_launch(moe_fast_kernel<true, kVariant, 0>, grid, block, 0, st, a, s);
    return;
  }
  if constexpr (kVariant == 1) {
    if (a.K == kFlashDownK) {
      pdl_launch(moe_fast_kernel<false, kVariant, kFlashDownK>, grid, block, 0, st, a, s);
      return;
    }
  }
  pdl_launch(moe_fast_kernel<false, kVariant, 0>, grid, block, 0, st, a, s);
}

void launch_paired(bool gate_up, const MoeFastArgs& a, cudaStream_t st) {
  using dsinfer::cuda::pdl_launch;
  const int rows = gate_up ? md::kFastGateRows : md::kFastDownRows;
  const dim3 grid(unsigned(a.N / rows), unsigned(a.big_grid)), block(kFastThreads);
  if (gate_up) pdl_launch(moe_fast_paired_kernel<true, 0>, grid, block, 0, st, a);
  else if (a.K == kFlashDownK) pdl_launch(moe_fast_paired_kernel<false, kFlashDownK>, grid, block, 0, st, a);
  else pdl_launch(moe_fast_paired_kernel<false, 0>, grid, block, 0, st, a);
}
}  // namespace

void launch_moe_fast_shared(bool gate_up, const MoeFastArgs& a, const MoeFastShared& s, int64_t max_active,
                            void* stream, MoeFastVariant variant) {
  const int rows = gate_up ? md::kFastGateRows : md::kFastDownRows;
  const int64_t shared_slots = (s.rows + kFastTokens - 1) / kFastTokens;
  const dim3 grid(unsigned(a.N / rows), unsigned(shared_slots + max_active));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  // The paired kernel has the word decode only: session 18's decode keeps every expert in the single-pass kernel.
  MoeFastArgs args = a;
  if (variant != MoeFastVariant::kWordDecode || args.big_grid < 1) args.big = nullptr;
  if (variant == MoeFastVariant::kWordDecode) launch_variant<1>(gate_up, args, s, grid, st);
  else launch_variant<0>(gate_up, args, s, grid, st);
  if (args.big) launch_paired(gate_up, args, st);
}

void launch_moe_fast(bool gate_up, const MoeFastArgs& a, int64_t max_active, void* stream) {
  launch_moe_fast_shared(gate_up, a, MoeFastShared{}, max_active, stream, MoeFastVariant::kWordDecode);
}

}  // namespace dsinfer::ops::cuda::detail
