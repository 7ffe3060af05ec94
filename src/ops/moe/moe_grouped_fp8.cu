// FP8 grouped (prefill) MoE GEMMs on Hopper's wgmma for FP4_G32 experts with E8M0 scales (numeric contract in
// moe_fp8_common.h, design in docs/kernels.md "MoE grouped FP8 path"). Work item: 128 permuted rows of one expert
// (a row tile of the device-built list shared with the bf16 grouped path) x 128 weight rows (a column tile); a
// persistent grid of one CTA per SM walks the items row tile major. CTA = 384 threads, warp-specialized: warpgroup 0
// produces (setmaxnreg down): per 128-k stage it cp.asyncs the raw FP4 bytes + E8M0 scales of the weight rows
// kRawAhead stages ahead into a producer-only ring, and, once the consumers released a slot (mbarrier `empty`), one
// thread loads the two e4m3 terms of the A rows by one TMA box (the A rows are contiguous: x is quantized in permuted
// row order) into the slot's 128-byte-swizzled tiles, the others their scales by cp.async (both landings counted by
// the slot's `full` mbarrier); then it expands the stage's FP4 codes to e4m3 into the slot's swizzled B tile (a prmt
// table per 32-k group, exact) and arrives on `full`. Warpgroups 1 and 2 consume (setmaxnreg up; 64 rows each): per
// scale block (gate/up 128 k, down 64 k) the m64n128k32 wgmmas of the first and then the second A term into one
// block accumulator, promoted into the fp32 result with (row scale x column block scale); release the slot; after the
// item's last stage the epilogue. The two consumers take turns to issue their blocks' wgmmas (named barriers 2 and
// 3), so the tensor cores run one warpgroup's block while the other waits for and promotes its previous one.
// Gate/up: W1 and W3 rows of the same 64 columns in one tile; epilogue h = silu(min(g, L)) * clamp(u, -L, L),
// quantized 1x64 (the tile's 64 columns) to two e4m3 terms for the down kernel. Down: W2, epilogue fp32 rows of yp.
// Deterministic, and a row's result does not depend on the other rows.
// Not yet: the expansion over two producer warpgroups, a fused gate/up + down item order (docs/kernels.md).
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/moe/moe_fp8_common.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace md = ::dsinfer::ops::moe_detail;
using ::dsinfer::cuda::sm90::cp_async16;
using ::dsinfer::cuda::sm90::cp_async4;
using ::dsinfer::cuda::sm90::cp_async8;
using ::dsinfer::cuda::sm90::cp_async_commit;
using ::dsinfer::cuda::sm90::cp_async_wait;
using ::dsinfer::cuda::sm90::fence_proxy_async;
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_arrive_cp_async;
using ::dsinfer::cuda::sm90::mbar_arrive_expect_tx;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::smem_u32;
using ::dsinfer::cuda::sm90::wgmma_commit;
using ::dsinfer::cuda::sm90::wgmma_fence;
using ::dsinfer::cuda::sm90::wgmma_wait;
constexpr int BM = md::kGrpBM, BN = md::kGrpBN, BK = md::kGrpBK;
// 384 threads: warpgroup 0 produces (loads, expands), warpgroups 1 and 2 consume (64 rows each: wgmma, promotion,
// epilogue). Registers moved from the producer to the consumers by setmaxnreg (128 x 88 + 256 x 208 <= 64K).
constexpr int NT = 384, kProducerRegs = 88, kConsumerRegs = 208;
constexpr int kSlots = 3;  // consumer ring: stages the producer may run ahead (full slots)
// Producer-only ring of raw FP4 stages, loaded kRawAhead stages early. Measured (bench/NOTES.md, issue 30, session
// 3): 6 stages ahead (8 slots) or an L2::256B prefetch on these loads changed nothing (+-1 %) at ~1.9 us per stage;
// 3 ahead keeps ~1 us of DRAM latency covered at the turn-taking consumers' shorter stages.
constexpr int kRawAhead = 3, kRawSlots = kRawAhead + 2;
constexpr int kA = BM * BK;        // e4m3 A tile, 128-byte rows, TMA's 128-byte swizzle (piece c of row r at c ^ r%8)
constexpr int kBx = BN * BK;       // expanded e4m3 B tile (swizzled as A)
constexpr int kSa = BM * 2 * 4;    // A scales [row][blocks per stage: gate/up 1, down 2]
constexpr int kSb = 2 * BN * 4;    // B block scales [block][128 rows]
// consumer slot: A first term, A second term (kA after it), expanded B, A scales, B scales
constexpr int kOffB = 2 * kA, kOffSa = kOffB + kBx, kOffSb = kOffSa + kSa, kSlot = kOffSb + kSb;
constexpr int kRaw = BN * BK / 2;  // raw FP4 rows, 64 bytes each (16-byte piece q of row r at q ^ (r / 2 % 4))
constexpr int kRawSlot = kRaw + BN * 4;  // + E8M0 bytes, 4 per row
constexpr int kOffRaw = kSlots * kSlot, kOffBar = kOffRaw + kRawSlots * kRawSlot;
constexpr int kSmem = 1024 + kOffBar + 2 * kSlots * 8;  // + 1024: the base is aligned up to 1024; 8-byte mbarriers
static_assert(kSmem <= 227 * 1024, "Hopper's shared memory per block");
static_assert(kSlot % 1024 == 0 && kOffSb % 16 == 0, "1024-byte aligned wgmma tiles");
static_assert(BM == 128 && BN == 128 && BK == 128, "the loaders below assume these sizes");
static_assert(md::kFp8BlockGateUp == 128 && md::kFp8BlockDown == 64, "one promoted block per stage / per half stage");
// k per activation scale and promoted block (gate/up: x, 128; down: h, 64) and blocks per 128-k stage
template <bool kGateUp>
constexpr int kBlk = kGateUp ? md::kFp8BlockGateUp : md::kFp8BlockDown;
template <bool kGateUp>
constexpr int kNB = BK / kBlk<kGateUp>;

// Keeps the compiler from moving accesses of the accumulator registers across the asynchronous wgmma.
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
// D (64 x 128 fp32, the wgmma accumulator layout) = (scale_d ? D : 0) + A (64 x 32 e4m3 at da) * B (128 x 32 e4m3
// at db)^T, both K-major in 128-byte swizzled rows.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}

// The producer warpgroup's own barrier (id 1; __syncthreads uses 0).
__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
// TMA: the box at (k, row, 0) of the A tensor map (128 k x 128 rows x both terms) into shared memory at dst, its
// bytes counted on the mbarrier bar.
__device__ __forceinline__ void tma_load_a(uint32_t dst, const CUtensorMap& map, int k, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(&map)), "r"(k), "r"(row), "r"(0), "r"(bar)
      : "memory");
}
// The consumer warpgroups' turns to issue wgmmas: named barriers 2 (warpgroup 1's turn) and 3 (warpgroup 2's), over
// their 256 threads (bar.sync waits, bar.arrive passes the turn on without waiting).
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// A work item of the persistent grid: CTA row tile `tile` of the device-built list x column tile `col`.
struct Item {
  int e, rb, rows, col;
};
__device__ __forceinline__ Item item_of(const MoeGroupedFp8Args& p, int w, int ncols) {
  const int tile = w / ncols;
  const int e = p.tiles[1 + 2 * tile];
  const int rb = p.offsets[e] + p.tiles[2 + 2 * tile];
  return {e, rb, min(BM, p.offsets[e + 1] - rb), w % ncols};
}

// The producer thread's weight sources in the current item, spread so that each warp instruction reads whole 64-byte
// raw weight rows (4 lanes per row): rows (tid >> 2) + 32 i, piece tid & 3, and the E8M0 bytes of weight row tid.
struct BSrc {
  const uint8_t* row[4];
  const uint8_t* scale;
};
// The A row whose scales the producer thread loads in item it: rb + tid, -1 past the expert's rows (zero fill).
__device__ __forceinline__ int32_t a_scale_row(const Item& it) {
  return int(threadIdx.x) < it.rows ? it.rb + int(threadIdx.x) : -1;
}
// weight row br: gate/up: W1 (br < 64) or W3 row col * 64 + br % 64; down: W2 row col * 128 + br
template <bool kGateUp>
__device__ __forceinline__ const uint8_t* weight_row(const MoeGroupedFp8Args& p, const Item& it, int br, bool scale) {
  const bool up = kGateUp && br >= 64;
  const int64_t n = int64_t(it.col) * (kGateUp ? md::kGrpHCols : BN) + (kGateUp ? (br & 63) : br);
  const void* base = scale ? (up ? p.s3[it.e] : p.s1[it.e]) : (up ? p.w3[it.e] : p.w1[it.e]);
  return static_cast<const uint8_t*>(base) + n * (scale ? p.K / 32 : p.K / 2);
}
template <bool kGateUp>
__device__ __forceinline__ BSrc b_source(const MoeGroupedFp8Args& p, const Item& it) {
  BSrc b;
#pragma unroll
  for (int i = 0; i < 4; ++i) b.row[i] = weight_row<kGateUp>(p, it, int(threadIdx.x >> 2) + 32 * i, false);
  b.scale = weight_row<kGateUp>(p, it, int(threadIdx.x), true);
  return b;
}

// Stage kt of the A rows rb .. rb + 127 (both terms: one TMA box, issued by thread 0 and counted on the slot's full
// barrier; rows past the expert's are another expert's or zero, computed but never stored) and their scales (row
// srow, cp.async) into consumer slot `slot` (shared address).
template <bool kGateUp>
__device__ __forceinline__ void load_a(const MoeGroupedFp8Args& p, const CUtensorMap& map, int rb, int32_t srow,
                                       int kt, uint32_t slot, uint32_t full) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    mbar_arrive_expect_tx(full, 2 * kA);
    tma_load_a(slot, map, kt * BK, rb, full);
  }
  const float* ss = p.a_scale + int64_t(max(srow, 0)) * (p.K / kBlk<kGateUp>) + kt * kNB<kGateUp>;
  const uint32_t sa = slot + kOffSa + uint32_t(tid * kNB<kGateUp> * 4);
  if constexpr (kGateUp) cp_async4(sa, ss, srow >= 0);
  else cp_async8(sa, ss, srow >= 0);
}
// Stage kt of the raw weight rows (64 bytes each, 16-byte piece q of row r at q ^ (r / 2 % 4)) and their E8M0 bytes
// into raw slot `raw`.
__device__ __forceinline__ void load_b(const BSrc& b, int kt, uint32_t raw) {
  const int tid = threadIdx.x, q = tid & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int br = (tid >> 2) + 32 * i;
    cp_async16(raw + uint32_t(br * 64 + ((q ^ ((br >> 1) & 3)) << 4)), b.row[i] + int64_t(kt) * (BK / 2) + q * 16,
               true);
  }
  cp_async4(raw + kRaw + uint32_t(tid * 4), b.scale + int64_t(kt) * (BK / 32), true);
}

// 4 FP4 codes (nibbles of the low 16 bits of w) -> 4 e4m3 bytes through the magnitude table (t0: codes 0..3, t1:
// 4..7) and the sign bits.
__device__ __forceinline__ uint32_t expand4(uint32_t w, uint32_t t0, uint32_t t1) {
  return __byte_perm(t0, t1, w & 0x7777u) | __byte_perm(0u, 0x80808080u, (w >> 1) & 0x4444u);
}

// The producer thread expands its weight row (128 k) of the raw stage at `raw` into the swizzled e4m3 tile bx and
// the block scales sb[block][row] (gate/up: one 128-k block; down: two 64-k blocks).
template <bool kGateUp>
__device__ __forceinline__ void expand_row(const uint8_t* raw, uint8_t* bx, float* sb) {
  const int br = threadIdx.x;
  const uint32_t sw = *reinterpret_cast<const uint32_t*>(raw + kRaw + br * 4);  // the row's 4 E8M0 bytes
  const uint32_t m01 = max(sw & 0xFFu, (sw >> 8) & 0xFFu), m23 = max((sw >> 16) & 0xFFu, sw >> 24);
  if constexpr (kGateUp) {
    sb[br] = __uint_as_float(md::fp8_block_scale_bits(max(m01, m23)));
  } else {
    sb[br] = __uint_as_float(md::fp8_block_scale_bits(m01));
    sb[BN + br] = __uint_as_float(md::fp8_block_scale_bits(m23));
  }
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint32_t m = kGateUp ? max(m01, m23) : g < 2 ? m01 : m23;
    uint32_t t0, t1;
    md::fp4_e4m3_table(int((sw >> (8 * g)) & 0xFFu) - int(m), t0, t1);
    const uint4 v = *reinterpret_cast<const uint4*>(raw + br * 64 + ((g ^ ((br >> 1) & 3)) << 4));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // 16-byte piece 2g + h of the row: words 2h, 2h + 1
      uint4 o;
      o.x = expand4(w[2 * h], t0, t1);
      o.y = expand4(w[2 * h] >> 16, t0, t1);
      o.z = expand4(w[2 * h + 1], t0, t1);
      o.w = expand4(w[2 * h + 1] >> 16, t0, t1);
      const int c = 2 * g + h;
      *reinterpret_cast<uint4*>(bx + br * 128 + ((c ^ (br & 7)) << 4)) = o;
    }
  }
}

// acc += blk * (row scale x column block scale) for the thread's accumulator elements: rows r0, r0 + 8 (scales
// sa0, sa1), columns 8j + 2t, +1 (block scales sbh[col]).
__device__ __forceinline__ void promote(float (&acc)[64], const float (&blk)[64], float sa0, float sa1,
                                        const float* sbh, int t) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 s = *reinterpret_cast<const float2*>(sbh + 8 * j + 2 * t);
    acc[4 * j + 0] = fmaf(blk[4 * j + 0], sa0 * s.x, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(blk[4 * j + 1], sa0 * s.y, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(blk[4 * j + 2], sa1 * s.x, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(blk[4 * j + 3], sa1 * s.y, acc[4 * j + 3]);
  }
}

__device__ __forceinline__ uint32_t e4m3x2(float a, float b) {
  return uint32_t(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3)) |
         (uint32_t(__nv_cvt_float_to_fp8(b, __NV_SATFINITE, __NV_E4M3)) << 8);
}
// The two e4m3 terms of scaled values a, b (moe_fp8_common.h): hi = e4m3(v), lo = e4m3(v - hi), two codes each.
__device__ __forceinline__ void e4m3x2_terms(float a, float b, uint16_t& hi, uint16_t& lo) {
  const uint32_t h = e4m3x2(a, b);
  const __half2_raw d = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(h), __NV_E4M3);  // exact: e4m3 in half
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&d));
  hi = uint16_t(h);
  lo = uint16_t(e4m3x2(a - f.x, b - f.y));
}

// Gate/up epilogue of one row (half 0: r0, 1: r0 + 8): h for the thread's 16 columns, the row's amax over the quad
// (the 4 lanes holding its 64 columns), e4m3 h and its scale.
__device__ __forceinline__ void gate_up_row(const MoeGroupedFp8Args& p, const float (&acc)[64], int half, int64_t grow,
                                            bool valid, int t, int col) {
  float h[16];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float gv = acc[4 * j + 2 * half + e], uv = acc[4 * (j + 8) + 2 * half + e];
      if (p.limit > 0.0f) {
        gv = fminf(gv, p.limit);
        uv = fminf(fmaxf(uv, -p.limit), p.limit);
      }
      const float hv = gv / (1.0f + expf(-gv)) * uv;
      h[2 * j + e] = hv;
      amax = fmaxf(amax, fabsf(hv));
    }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  if (!valid) return;
  const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
  const int64_t n0 = int64_t(col) * md::kGrpHCols;
  uint8_t* out = p.hq + grow * p.N + n0;
  uint8_t* out_lo = p.hq_lo + grow * p.N + n0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint16_t hi, lo;
    e4m3x2_terms(h[2 * j] * inv, h[2 * j + 1] * inv, hi, lo);
    *reinterpret_cast<uint16_t*>(out + 8 * j + 2 * t) = hi;
    *reinterpret_cast<uint16_t*>(out_lo + 8 * j + 2 * t) = lo;
  }
  if (t == 0) p.hs[grow * (p.N / 64) + col] = amax / 448.0f;
}

// Epilogue of consumer warpgroup cwg (rows 64 cwg ..) of item `it`.
template <bool kGateUp>
__device__ __forceinline__ void epilogue(const MoeGroupedFp8Args& p, const Item& it, int cwg, int lane,
                                         const float (&acc)[64]) {
  const int warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = cwg * 64 + warp * 16 + g + 8 * half;
    const int64_t grow = int64_t(it.rb) + row;
    if constexpr (kGateUp) {
      gate_up_row(p, acc, half, grow, row < it.rows, t, it.col);
    } else {
      if (row >= it.rows) continue;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int64_t col = int64_t(it.col) * BN + 8 * j + 2 * t;
        *reinterpret_cast<float2*>(p.yout + grow * p.N + col) =
            make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
      }
    }
  }
}

// Block `blk_i` (kBlk k) of a stage for one warpgroup: blk = (A + A_lo) rows x B rows over the block (kBlk / 32
// k-steps per term; the second term's tile is kA after the first's).
template <bool kGateUp>
__device__ __forceinline__ void issue_block(float (&blk)[64], uint32_t a_tile, uint32_t b_tile, int blk_i) {
  fence_regs(blk);
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < kBlk<kGateUp> / 32; ++s) {
    const uint32_t off = uint32_t(blk_i * kBlk<kGateUp> + s * 32);
    const uint64_t db = smem_desc(b_tile + off);
    wgmma_m64n128k32(blk, smem_desc(a_tile + off), db, s);
    wgmma_m64n128k32(blk, smem_desc(a_tile + kA + off), db, 1);
  }
  wgmma_commit();
}

// Shared-memory addresses of the kernel: consumer slots, raw slots, full[kSlots] then empty[kSlots] mbarriers.
struct Smem {
  uint8_t* base;
  uint32_t s0;
  __device__ uint32_t slot(int c) const { return s0 + uint32_t((c % kSlots) * kSlot); }
  __device__ uint32_t raw(int c) const { return s0 + uint32_t(kOffRaw + (c % kRawSlots) * kRawSlot); }
  __device__ uint32_t full(int c) const { return s0 + uint32_t(kOffBar + (c % kSlots) * 8); }
  __device__ uint32_t empty(int c) const { return s0 + uint32_t(kOffBar + (kSlots + c % kSlots) * 8); }
  __device__ uint32_t parity(int c) const { return uint32_t(c / kSlots) & 1u; }
  __device__ uint8_t* ptr(uint32_t addr) const { return base + (addr - s0); }
};

// The CTA's item count (items blockIdx.x, + gridDim.x, ...).
__device__ __forceinline__ int cta_items(int nitems) {
  return nitems > int(blockIdx.x) ? (nitems - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
}

// Producer warpgroup: global stage c (items of this CTA one after the other, nk stages each). Iteration c loads the
// raw weights of stage c + kRawAhead (producer-only ring), waits for consumer slot c to be released and loads its A
// rows (TMA) and scales (their arrival counted by the slot's full barrier), waits for the raw stage c (all but the
// kRawAhead newest cp.async groups) and, after the producer barrier, expands weight row tid into the slot and arrives
// on full. Raw slot (c + kRawAhead) % kRawSlots was last read in iteration c - 2, before every producer thread passed
// the barrier of iteration c - 1. Two cursors (item, stage): the raw stream runs ahead.
template <bool kGateUp>
__device__ __forceinline__ void producer(const MoeGroupedFp8Args& p, const CUtensorMap& amap, const Smem& sm,
                                         int nitems, int ncols, int nk) {
  static_assert(kRawSlots >= kRawAhead + 2, "the raw ring must hold the stages in flight and the one expanded");
  const int total = cta_items(nitems) * nk;  // this CTA's stages
  int bw = -1, aw = -1;                      // the items the two sources are for
  BSrc bs{};
  int arb = 0;                               // the A item's first row and this thread's A scale row
  int32_t asrow = -1;
  auto load_raw = [&](int c) {
    const int i = c / nk;
    if (i != bw) {
      bw = i;
      bs = b_source<kGateUp>(p, item_of(p, int(blockIdx.x) + i * int(gridDim.x), ncols));
    }
    load_b(bs, c % nk, sm.raw(c));
  };
  for (int c = 0; c < kRawAhead; ++c) {
    if (c < total) load_raw(c);
    cp_async_commit();
  }
  for (int c = 0; c < total; ++c) {
    if (c + kRawAhead < total) load_raw(c + kRawAhead);
    mbar_wait(sm.empty(c), sm.parity(c) ^ 1u);  // a fresh barrier passes parity 1 at once
    const int i = c / nk;
    if (i != aw) {
      aw = i;
      const Item it = item_of(p, int(blockIdx.x) + i * int(gridDim.x), ncols);
      arb = it.rb;
      asrow = a_scale_row(it);
    }
    const uint32_t slot = sm.slot(c);
    load_a<kGateUp>(p, amap, arb, asrow, c % nk, slot, sm.full(c));
    mbar_arrive_cp_async(sm.full(c));
    cp_async_commit();
    cp_async_wait<kRawAhead>();
    producer_sync();
    expand_row<kGateUp>(sm.ptr(sm.raw(c)), sm.ptr(slot + kOffB), reinterpret_cast<float*>(sm.ptr(slot + kOffSb)));
    fence_proxy_async();  // st.shared data read next by wgmma
    mbar_arrive(sm.full(c));
  }
  cp_async_wait<0>();
}

// Consumer warpgroup cwg (rows 64 cwg .. of each item): per stage wait for its slot, per scale block (in its turn:
// the two warpgroups alternate, warpgroup 1 first) the wgmmas of both A terms, then the wait and the promotion while
// the other warpgroup's block runs; release the slot; the epilogue per item.
template <bool kGateUp>
__device__ __forceinline__ void consumer(const MoeGroupedFp8Args& p, const Smem& sm, int nitems, int ncols, int nk,
                                         int cwg) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, t = lane & 3;
  const int ra = cwg * 64 + warp * 16 + (lane >> 2);  // the thread's accumulator rows ra, ra + 8
  constexpr int NB = kNB<kGateUp>;
  // Turns: warpgroup 1 issues block u, then warpgroup 2 its block u, then warpgroup 1 block u + 1, ...; warpgroup 2
  // opens the first turn, warpgroup 1 takes the last pass after its loop, so every pass is waited for.
  const int mine = 2 + cwg, theirs = 3 - cwg;
  if (cwg == 1) turn_pass(theirs);
  int c = 0;
  for (int w = int(blockIdx.x); w < nitems; w += int(gridDim.x)) {
    const Item it = item_of(p, w, ncols);
    float acc[64], blk[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    // A warpgroup whose 64 rows are all past the expert's rows (small experts: most tiles below T = 2,048) only
    // passes its slots and turns on: its tensor work would be zeros.
    const bool live = it.rows > cwg * 64;
    for (int kt = 0; kt < nk; ++kt, ++c) {
      const uint32_t slot = sm.slot(c);
      mbar_wait(sm.full(c), sm.parity(c));
      const float* sa = reinterpret_cast<const float*>(sm.ptr(slot + kOffSa));
      const float* sb = reinterpret_cast<const float*>(sm.ptr(slot + kOffSb));
#pragma unroll
      for (int bi = 0; bi < NB; ++bi) {
        turn_wait(mine);
        if (live) {
          issue_block<kGateUp>(blk, slot + uint32_t(cwg * 64 * 128), slot + kOffB, bi);
          turn_pass(theirs);
          wgmma_wait<0>();
          fence_regs(blk);
          promote(acc, blk, sa[ra * NB + bi], sa[(ra + 8) * NB + bi], sb + bi * BN, t);
        } else {
          turn_pass(theirs);
        }
      }
      mbar_arrive(sm.empty(c));
    }
    if (live) epilogue<kGateUp>(p, it, cwg, lane, acc);
  }
  if (cwg == 0) turn_wait(mine);
}

// Persistent grid over the items (row tile x column tile, row tile major: the CTAs running at once share A rows).
// amap: the A tensor map (make_a_map).
template <bool kGateUp>
__global__ void __launch_bounds__(NT, 1)
    moe_grouped_fp8_kernel(const __grid_constant__ MoeGroupedFp8Args p, const __grid_constant__ CUtensorMap amap) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const Smem sm{smem, smem_u32(smem)};
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i) {
      mbar_init(sm.full(i), 2 * BM + 1);    // the producer's 128 threads: scales landed, then B expanded; + the TMA
      mbar_init(sm.empty(i), NT - BM);      // the consumers' 256 threads
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
  }
  __syncthreads();
  const int ncols = int(p.N / (kGateUp ? md::kGrpHCols : BN)), nitems = p.tiles[0] * ncols, nk = int(p.K / BK);
  const int wg = int(threadIdx.x) >> 7;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    producer<kGateUp>(p, amap, sm, nitems, ncols, nk);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    consumer<kGateUp>(p, sm, nitems, ncols, nk, wg - 1);
  }
}

// Token t's x row in blocks of kBlock k: each block quantized once to two e4m3 terms + a scale (moe_fp8_common.h) and
// written to every permuted row pos_of[t * topk + j] >= 0 of q / lo / s (one warp per block, lane: kBlock / 32
// consecutive elements). Every permuted row is one assignment's, so q / lo / s hold x row perm_token[r] at row r,
// as the GEMM reads them; x is read once instead of topk times (bench/NOTES.md "Session 16 — MoE prefill").
template <int kBlock>
__global__ void moe_quant_kernel(const float* x, const int32_t* pos_of, int64_t T, int64_t topk, int64_t row_blocks,
                                 uint8_t* q, uint8_t* lo, float* s) {
  constexpr int kPer = kBlock / 32;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5), blocks = T * row_blocks;
  for (int64_t b = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); b < blocks; b += warps) {
    const int64_t t = b / row_blocks, kb = b - t * row_blocks;
    const float* src = x + b * kBlock + lane * kPer;
    float v[kPer];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[i] = src[i];
      amax = fmaxf(amax, fabsf(v[i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
    uint16_t hi[kPer / 2], l[kPer / 2];
#pragma unroll
    for (int i = 0; i < kPer; i += 2) e4m3x2_terms(v[i] * inv, v[i + 1] * inv, hi[i / 2], l[i / 2]);
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t p = pos_of[t * topk + j];
      if (p < 0) continue;
      const int64_t pb = int64_t(p) * row_blocks + kb;
#pragma unroll
      for (int i = 0; i < kPer; i += 2) {
        *reinterpret_cast<uint16_t*>(q + pb * kBlock + lane * kPer + i) = hi[i / 2];
        *reinterpret_cast<uint16_t*>(lo + pb * kBlock + lane * kPer + i) = l[i / 2];
      }
      if (lane == 0) s[pb] = amax / 448.0f;
    }
  }
}

// The A tensor map of a launch: uint8 [2 terms][rows_a][K] (the second term a_lo - a bytes after the first), boxes of
// 128 k x 128 rows x 2 terms with the 128-byte swizzle the wgmma descriptors expect; rows past rows_a read as zero.
// False if the map cannot be made (no driver entry point, or a layout TMA does not take).
bool make_a_map(const MoeGroupedFp8Args& a, CUtensorMap& map) {
  const cuuint64_t dims[3] = {cuuint64_t(a.K), cuuint64_t(a.rows_a), 2};
  const cuuint64_t strides[2] = {cuuint64_t(a.K), cuuint64_t(a.a_lo - a.a)};
  const cuuint32_t box[3] = {BK, BM, 2};
  return dsinfer::cuda::encode_tiled_map_128b(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, a.a, dims, strides, box);
}

}  // namespace

void launch_moe_quant(const float* x, const int32_t* pos_of, int64_t T, int64_t topk, int64_t K, int64_t block,
                      uint8_t* q, uint8_t* lo, float* s, void* stream) {
  const int64_t blocks = T * K / block;
  const unsigned grid = unsigned(std::clamp<int64_t>((blocks + 7) / 8, 1, 132 * 16));
  const auto st = static_cast<cudaStream_t>(stream);
  if (block == 128) moe_quant_kernel<128><<<grid, 256, 0, st>>>(x, pos_of, T, topk, K / block, q, lo, s);
  else moe_quant_kernel<64><<<grid, 256, 0, st>>>(x, pos_of, T, topk, K / block, q, lo, s);
}

bool launch_moe_grouped_fp8(bool gate_up, const MoeGroupedFp8Args& a, int64_t max_tiles, void* stream) {
  CUtensorMap amap;
  if (!make_a_map(a, amap)) return false;
  // Above 48 KB of dynamic shared memory needs the opt-in (per device, so on every launch, as the other kernels).
  if (gate_up) cudaFuncSetAttribute(moe_grouped_fp8_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  else cudaFuncSetAttribute(moe_grouped_fp8_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  // persistent: one CTA per SM, at most one per item (the item count is known on the device only); the SM count
  // read once (the same on every device this engine drives)
  static const int sms = [] {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
  }();
  const int64_t cols = gate_up ? md::kGrpHCols : BN;
  const int64_t items = std::max<int64_t>(1, max_tiles * (a.N / cols));
  const dim3 grid(unsigned(std::clamp<int64_t>(items, 1, sms)));
  const auto st = static_cast<cudaStream_t>(stream);
  if (gate_up) moe_grouped_fp8_kernel<true><<<grid, NT, kSmem, st>>>(a, amap);
  else moe_grouped_fp8_kernel<false><<<grid, NT, kSmem, st>>>(a, amap);
  return true;
}

}  // namespace dsinfer::ops::cuda::detail
