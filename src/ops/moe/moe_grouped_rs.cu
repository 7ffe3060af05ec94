// BF16 grouped (prefill) MoE GEMMs on Hopper's wgmma with the FP4 weights as the register A operand ("RS"), for
// FP4_G32 experts with E8M0 scales (design in docs/kernels.md "MoE grouped RS path"). Same numerics as the bf16 grouped
// path (moe_grouped.cu): x and the SwiGLU output h rounded to bf16, the weights exact (e2m1 x 2^e is a bf16, decoded
// as in moe_fast_common.h), fp32 sums over the whole K (no promotion: the scale is in the weights).
//
// Work item: a row tile of the device-built list (<= 128 permuted rows of one expert: the wgmma N, the tile's rows
// rounded up to 16) x a column tile of 64 kCwg weight rows (the wgmma M: 64 per consumer warpgroup). Persistent grid
// of one CTA per SM walking the items row tile major. CTA = 128 (kCwg + 1) threads, warp-specialized: warpgroup 0 produces
// (setmaxnreg down): per 128-k stage, once the consumers released a ring slot (mbarrier `empty`), thread 0 loads the
// stage's activation tile (bf16, chunk layout, 128 rows x 128 k, two TMA boxes of 64 k with the 128-byte swizzle the
// wgmma descriptors expect) and every thread cp.asyncs its share of the raw FP4 bytes + E8M0 bytes of the weight rows;
// all land on the slot's `full` mbarrier. No proxy fence: the TMA writes what wgmma reads (both async proxy), and the
// weights are read by the consumers' own ld.shared. Consumer warpgroups (setmaxnreg up): per stage each thread loads
// the 16 FP4 bytes of its two weight rows (lane t of a quad owns k 32t..32t+31 of the chunk, as the chunk layout
// orders the activations) and their scales, then per 16-k step decodes 4 bf16x2 A registers (two rows, two pairs)
// and issues the step's m64nNk16 wgmma with B from the slot, decoding step s + 1 while step s runs (double buffer,
// drained at the stage's end; the next stage's weight bytes and first decode come before that drain, under the
// stage's last wgmma); the slot is released after the stage's last wgmma. MoeGroupedRsArgs::variant (session 24,
// the default since session 26) swaps in a leaner consumer code with the same wgmmas on the same operands: the word decode
// (rs_decode_step_word), the step descriptors from the stage's first, the item entry from shared memory and the
// epilogue's row pointers.
// Gate/up: warp w's 16 rows are W1 rows (rows g) and W3 rows (rows g + 8) of the same 8 h columns, so g and u of an
// output meet in one thread; epilogue h = silu(min(g, L)) * clamp(u, -L, L) -> bf16 chunk layout (the down kernel's
// activations, permuted rows). Down: W2 rows, epilogue fp32 (or, yout16, bf16) rows of yp. Deterministic, and a
// row's result does not depend on the other rows (its column of the wgmma only).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/sm90_async.cuh"
#include "cuda/sm90_wgmma_rs.cuh"
#include "cuda/tensor_map.h"
#include "ops/moe/moe_fast_common.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_launch.h"
#include "ops/moe/moe_grouped_rs_decode.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace md = ::dsinfer::ops::moe_detail;
using ::dsinfer::cuda::sm90::cp_async16;
using ::dsinfer::cuda::sm90::cp_async4;
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_arrive_cp_async;
using ::dsinfer::cuda::sm90::mbar_arrive_expect_tx;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::smem_u32;
using ::dsinfer::cuda::sm90::tma_load_2d;
using ::dsinfer::cuda::sm90::wgmma_commit;
using ::dsinfer::cuda::sm90::wgmma_fence;
using ::dsinfer::cuda::sm90::wgmma_rs;
using ::dsinfer::cuda::sm90::wgmma_wait;

constexpr int BT = md::kGrpBM;   // permuted rows (tokens) per item: the tile list's row tile
constexpr int BK = md::kGrpBK;   // k per stage: one 128-k chunk of the chunk layout
constexpr int kBox = 64;         // k per TMA box (128 bytes of bf16: the swizzle width)
constexpr int kTile = BT * BK * 2;  // the activation tile of a stage: two boxes of BT rows x 128 bytes
static_assert(BT == 128 && BK == 128, "the loaders below assume these sizes");
static_assert(md::kFastScaleShift == 64, "the epilogues multiply by 2^64");

// Per-configuration sizes: kCwg consumer warpgroups, 64 weight rows each.
template <int kCwg>
struct Cfg {
  static constexpr int NT = 128 * (kCwg + 1);
  static constexpr int BW = 64 * kCwg;                 // weight rows per item
  static constexpr int kOffRaw = kTile;                // raw FP4 rows, 64 bytes each (16-byte piece t at 16 t)
  static constexpr int kOffSc = kOffRaw + BW * BK / 2;  // E8M0 bytes, 4 per row
  static constexpr int kSlot = (kOffSc + BW * 4 + 1023) / 1024 * 1024;
  static constexpr int kSlots = kCwg == 2 ? 5 : 4;
  static constexpr int kOffBar = kSlots * kSlot;
  static constexpr int kSmem = 1024 + kOffBar + 2 * kSlots * 8;  // + 1024: the base is aligned up to 1024
  // MoeGroupedRsVariant::kWordStageItem: an item entry (e, rb, rows, col) per slot after the mbarriers
  static constexpr int kOffItem = kOffBar + 2 * kSlots * 8;
  static constexpr int kSmemItem = kSmem + kSlots * 16;
  // gate/up: h columns per item (W1 and W3 rows of each); down: W2 rows per item
  static constexpr int kGateCols = 32 * kCwg;
  // registers moved from the producer to the consumers by setmaxnreg
  static constexpr int kProd = kCwg == 2 ? 40 : 32;
  static constexpr int kCons = kCwg == 2 ? 232 : 112;
  static_assert(kSmemItem <= 227 * 1024, "Hopper's shared memory per block");
  // within what the launch holds: NT x the entry cap of __launch_bounds__(NT, 1) (65536 / NT rounded down to 8)
  static_assert(128 * kProd + 128 * kCwg * kCons <= NT * (65536 / NT / 8 * 8), "the registers of the launch");
};

// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
// Keeps the compiler from moving accesses of the accumulator registers across the asynchronous wgmma.
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A work item of the persistent grid: row tile `tile` of the device-built list x column tile `col`.
struct Item {
  int e, rb, rows, col;
};
__device__ __forceinline__ Item item_of(const MoeGroupedRsArgs& p, int w, int ncols) {
  const int tile = w / ncols;
  const int e = p.tiles[1 + 2 * tile];
  const int rb = p.offsets[e] + p.tiles[2 + 2 * tile];
  return {e, rb, min(BT, p.offsets[e + 1] - rb), w % ncols};
}

// Weight row (expert row index) of the item's row r (0 .. BW - 1). Gate/up: warp-row block r / 16 covers h columns
// col * kGateCols + 8 (r / 16) .. + 7, W1 for r % 16 < 8, W3 else. Down: W2 row col * BW + r.
template <int kCwg, bool kGateUp>
__device__ __forceinline__ const uint8_t* weight_row(const MoeGroupedRsArgs& p, const Item& it, int r, bool scale) {
  using C = Cfg<kCwg>;
  const bool up = kGateUp && (r & 8);
  const int64_t n = kGateUp ? int64_t(it.col) * C::kGateCols + 8 * (r >> 4) + (r & 7) : int64_t(it.col) * C::BW + r;
  const void* base = scale ? (up ? p.s3[it.e] : p.s1[it.e]) : (up ? p.w3[it.e] : p.w1[it.e]);
  return static_cast<const uint8_t*>(base) + n * (scale ? p.K / 32 : p.K / 2);
}

// The producer thread's weight sources in an item: raw rows (tid >> 2) + 32 i (i < 2 kCwg), piece tid & 3 (whole
// 64-byte rows per 4 lanes), and the E8M0 rows tid + 128 i (i < kCwg / 2). Both sequences are evenly spaced in the
// expert's rows (gate/up: 16 and 64 h columns apart, W1 or W3 by the thread; down: 32 and 128 rows), so a base and a
// step each (few producer registers).
struct WSrc {
  const uint8_t* row;
  const uint8_t* scale;
  int64_t row_step, scale_step;
};
template <int kCwg, bool kGateUp>
__device__ __forceinline__ WSrc w_source(const MoeGroupedRsArgs& p, const Item& it) {
  const int tid = int(threadIdx.x);
  WSrc s;
  const uint8_t* r0 = weight_row<kCwg, kGateUp>(p, it, tid >> 2, false);
  s.row = r0 + (tid & 3) * 16;
  s.row_step = weight_row<kCwg, kGateUp>(p, it, (tid >> 2) + 32, false) - r0;
  s.scale = weight_row<kCwg, kGateUp>(p, it, tid, true);
  s.scale_step = weight_row<kCwg, kGateUp>(p, it, tid + 128, true) - s.scale;
  return s;
}

// Shared-memory addresses of global stage c (an int, or a uint32_t where the caller wants the unsigned % and /,
// a mask and a shift at 4 slots, instead of the signed sequences): ring slots, full[kSlots] then empty[kSlots]
// mbarriers, the item entries of MoeGroupedRsVariant::kWordStageItem.
template <int kCwg>
struct Smem {
  using C = Cfg<kCwg>;
  uint8_t* base;
  uint32_t s0;
  template <class I>
  __device__ uint32_t slot(I c) const { return s0 + uint32_t((c % I(C::kSlots)) * I(C::kSlot)); }
  template <class I>
  __device__ uint32_t full(I c) const { return s0 + uint32_t(I(C::kOffBar) + (c % I(C::kSlots)) * I(8)); }
  template <class I>
  __device__ uint32_t empty(I c) const {
    return s0 + uint32_t(I(C::kOffBar) + (I(C::kSlots) + c % I(C::kSlots)) * I(8));
  }
  template <class I>
  __device__ uint32_t parity(I c) const { return uint32_t(c / I(C::kSlots)) & 1u; }
  template <class I>
  __device__ uint32_t item(I c) const { return s0 + uint32_t(I(C::kOffItem) + (c % I(C::kSlots)) * I(16)); }
  __device__ const uint8_t* ptr(uint32_t addr) const { return base + (addr - s0); }
};

// The CTA's item count (items blockIdx.x, + gridDim.x, ...).
__device__ __forceinline__ int cta_items(int nitems) {
  return nitems > int(blockIdx.x) ? (nitems - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
}

// Producer warpgroup: global stage c (this CTA's items one after the other, nk stages each): wait for slot c to be
// released, then the activation tile (thread 0: two TMA boxes, counted as bytes on full) and the weight bytes
// (cp.async, each thread's arrival on full when its copies landed). kItem (MoeGroupedRsVariant::kWordStageItem): at an
// item's first stage thread 0 also writes the item (e, rb, rows, col) to the slot's entry (Smem::item) before its
// arrival on full (release; the consumers read it after their wait on full, acquire, and before their arrival on
// empty, so the entry of a later item cannot overwrite it in between).
template <int kCwg, bool kGateUp, bool kItem = false>
__device__ __forceinline__ void producer(const MoeGroupedRsArgs& p, const CUtensorMap& amap, const Smem<kCwg>& sm,
                                         int nitems, int ncols, int nk) {
  using C = Cfg<kCwg>;
  const int tid = int(threadIdx.x), total = cta_items(nitems) * nk;
  WSrc ws{};
  int rb = 0;
  Item cur{};
  for (int c = 0; c < total; ++c) {
    const int kt = c % nk;
    if (kt == 0) {
      const Item it = item_of(p, int(blockIdx.x) + (c / nk) * int(gridDim.x), ncols);
      ws = w_source<kCwg, kGateUp>(p, it);
      rb = it.rb;
      if constexpr (kItem) cur = it;
    }
    mbar_wait(sm.empty(c), sm.parity(c) ^ 1u);  // a fresh barrier passes parity 1 at once
    const uint32_t slot = sm.slot(c), full = sm.full(c);
    if (tid == 0) {
      if constexpr (kItem)
        if (kt == 0) {
          int4* entry = reinterpret_cast<int4*>(sm.base + (sm.item(c) - sm.s0));
          *entry = make_int4(cur.e, cur.rb, cur.rows, cur.col);
        }
      mbar_arrive_expect_tx(full, kTile);
      tma_load_2d(slot, &amap, kt * BK, rb, full);
      tma_load_2d(slot + BT * 128, &amap, kt * BK + kBox, rb, full);
    }
#pragma unroll
    for (int i = 0; i < 2 * kCwg; ++i)
      cp_async16(slot + C::kOffRaw + uint32_t(((tid >> 2) + 32 * i) * 64 + (tid & 3) * 16),
                 ws.row + i * ws.row_step + int64_t(kt) * (BK / 2), true);
#pragma unroll
    for (int i = 0; i < kCwg / 2; ++i)
      cp_async4(slot + C::kOffSc + uint32_t((tid + 128 * i) * 4),
                ws.scale + i * ws.scale_step + int64_t(kt) * (BK / 32), true);
    mbar_arrive_cp_async(full);
  }
}

// A stage's weight operands for a consumer thread: its two weight rows' 16 FP4 bytes (lane t's 32 k of the chunk) and
// their scales as bf16x2 factors (fp4_scale_bf16 in both halves; kX2: by fp4_scale_bf16x2, the same bits for every
// byte, tests/unit/test_moe_fast.cpp Fp4ScalePairMatchesScale).
struct WRegs {
  uint4 w0, w1;
  uint32_t F0, F1;
};
template <int kCwg, bool kX2 = false>
__device__ __forceinline__ void load_wregs(const Smem<kCwg>& sm, uint32_t slot, int wrow, int t, WRegs& r) {
  using C = Cfg<kCwg>;
  const uint8_t* raw = sm.ptr(slot + C::kOffRaw);
  const uint8_t* sc = sm.ptr(slot + C::kOffSc);
  r.w0 = *reinterpret_cast<const uint4*>(raw + wrow * 64 + t * 16);
  r.w1 = *reinterpret_cast<const uint4*>(raw + (wrow + 8) * 64 + t * 16);
  if constexpr (kX2) {
    r.F0 = md::fp4_scale_bf16x2(sc[wrow * 4 + t]);
    r.F1 = md::fp4_scale_bf16x2(sc[(wrow + 8) * 4 + t]);
  } else {
    const uint32_t f0 = md::fp4_scale_bf16(sc[wrow * 4 + t]), f1 = md::fp4_scale_bf16(sc[(wrow + 8) * 4 + t]);
    r.F0 = f0 | (f0 << 16);
    r.F1 = f1 | (f1 << 16);
  }
}

// One item's main loop for a consumer warpgroup with wgmma N = kN, or 16 nb chosen per stage at run time (kN = 0;
// a switch over the 8 shapes of the stage's unrolled steps, so that consecutive wgmmas on the accumulators have one
// shape and ptxas injects no warpgroup.arrive): per stage the thread's two weight rows (16 FP4 bytes and a scale
// each), then the 8 16-k steps' A registers decoded and their wgmmas issued, with a per-step double buffer: step s + 1 decoded into the other 4 registers while the warpgroup's own wgmma of step s runs
// (`wgmma.wait_group 1` before each decode frees the buffer step s - 1 read), drained at the stage's end (session 18,
// helper s18-moep2). A wgmma kept in flight ACROSS the stage boundary (the slot's mbarrier wait, the next stage's
// shared loads) makes ptxas serialize every wgmma (C7513), so the drain stays. The slot is released after the
// stage's last wgmma completed. kEarly (MoeGroupedRsArgs::early_next): under the stage's last wgmma the thread
// waits for the next stage's slot, loads its weight bytes and decodes its step 0, so that after the drain the next
// stage's first wgmma issues at once (same wgmmas, same order). Returns the next stage index. Rejected (session
// 23): no drain per stage, the slot of stage kt - 1 released after stage kt's first wgmma and `wait_group 1`: at
// cwg 4's 112 registers ptxas serializes every wgmma (C7512, insufficient registers).
// kVar (MoeGroupedRsArgs::variant, moe_grouped_launch.h): the decode (kSession23: rs_decode_step; kWordStageItem:
// rs_decode_step_word), and with kWordStageItem the step descriptors as the stage's first plus a constant and the
// scale factors by fp4_scale_bf16x2: the same A registers and descriptors, so the same wgmmas.
template <int kCwg, int kN, bool kEarly, MoeGroupedRsVariant kVar>
__device__ __forceinline__ int mainloop(const Smem<kCwg>& sm, int c0, int nk, int nb, int wrow, int t,
                                        float (&acc)[64]) {
  constexpr bool kWord = kVar != MoeGroupedRsVariant::kSession23;
  constexpr bool kStage = kVar == MoeGroupedRsVariant::kWordStageItem;
  // the global stage counter: unsigned with kStage (the slot and parity by a mask and a shift; c >= 0)
  std::conditional_t<kStage, uint32_t, int> c = c0;
  WRegs wr;
  uint32_t a[2][4];
  // the A registers of 16-k step s: rows g and g + 8, k pairs 2s and 2s + 1 (moe_grouped_rs_decode.cuh)
  auto decode = [&](uint32_t(&r)[4], int s) {
    if constexpr (kWord) md::rs_decode_step_word(wr.w0, wr.w1, wr.F0, wr.F1, s, r);
    else md::rs_decode_step(wr.w0, wr.w1, wr.F0, wr.F1, s, r);
  };
  if constexpr (kEarly) {
    mbar_wait(sm.full(c), sm.parity(c));
    load_wregs<kCwg, kStage>(sm, sm.slot(c), wrow, t, wr);
    decode(a[0], 0);
  }
  for (int kt = 0; kt < nk; ++kt, ++c) {
    const uint32_t slot = sm.slot(c);
    if constexpr (!kEarly) {
      mbar_wait(sm.full(c), sm.parity(c));
      load_wregs<kCwg, kStage>(sm, slot, wrow, t, wr);
    }
    // Step s's B at slot + (s / 4) BT 128 + (s % 4) 32 bytes. kStage: smem_desc(slot) + that offset / 16, the same
    // descriptor: a shared address is below 2^18 (so the mask keeps it whole), slot and offset are multiples of 16,
    // and (slot + offset) / 16 < 2^14 stays in the address field, below the flag bits.
    const uint64_t d0 = smem_desc(slot);
    auto desc = [&](int s) {
      if constexpr (kStage) return d0 + uint64_t(((s >> 2) * BT * 128 + (s & 3) * 32) >> 4);
      else return smem_desc(slot + uint32_t((s >> 2) * BT * 128 + (s & 3) * 32));
    };
    const bool next = kEarly && kt + 1 < nk;
    // the stage's 8 steps with wgmma N = kS, drained at the end
    auto steps = [&](auto shape) {
      constexpr int kS = decltype(shape)::value;
      if constexpr (!kEarly) decode(a[0], 0);
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        wgmma_fence();
        wgmma_rs<kS>(acc, a[s & 1], desc(s), kt > 0 || s > 0);
        wgmma_commit();
        if (s + 1 < 8) {
          wgmma_wait<1>();  // step s - 1 done: its buffer a[(s + 1) & 1] is free
          decode(a[(s + 1) & 1], s + 1);
        } else if (next) {
          wgmma_wait<1>();  // step 6 done: a[0] is free; step 7 (a[1]) runs on
          mbar_wait(sm.full(c + 1), sm.parity(c + 1));
          load_wregs<kCwg, kStage>(sm, sm.slot(c + 1), wrow, t, wr);
          decode(a[0], 0);
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
    };
    if constexpr (kN > 0) {
      steps(std::integral_constant<int, kN>{});
    } else {
      switch (nb) {
        case 1: steps(std::integral_constant<int, 16>{}); break;
        case 2: steps(std::integral_constant<int, 32>{}); break;
        case 3: steps(std::integral_constant<int, 48>{}); break;
        case 4: steps(std::integral_constant<int, 64>{}); break;
        case 5: steps(std::integral_constant<int, 80>{}); break;
        case 6: steps(std::integral_constant<int, 96>{}); break;
        case 7: steps(std::integral_constant<int, 112>{}); break;
        default: steps(std::integral_constant<int, 128>{}); break;
      }
    }
    mbar_arrive(sm.empty(c));  // the stage's wgmmas are done, its weight bytes in registers
  }
  return int(c);
}

// Epilogue of consumer warpgroup cwg (weight rows 64 cwg ..) of item `it`: accumulator columns (tokens) < it.rows.
// kRows (MoeGroupedRsVariant::kWordStageItem): the same values to the same addresses, each as the thread's first
// output (row rb + 2t) plus a constant multiple of N, instead of the full 64-bit index per output.
template <int kCwg, bool kGateUp, bool kRows = false>
__device__ __forceinline__ void epilogue(const MoeGroupedRsArgs& p, const Item& it, int cwg, int warp, int g, int t,
                                         const float (&acc)[64]) {
  using C = Cfg<kCwg>;
  constexpr float kScale = 0x1p64f;  // 2^kFastScaleShift: the decoded weights were scaled by 2^-64
  if constexpr (kRows) {
    // outputs (j, h) at rows rb + 2t + 8j + h: two row pointers (h = 0, 1) stepped by 8 rows
    const int64_t row0 = (int64_t(it.rb) + 2 * t) * p.N, step = 8 * p.N;
    const int lim = it.rows - 2 * t;  // output (j, h) exists iff 8j + h < lim
    if constexpr (kGateUp) {
      const int64_t col = int64_t(it.col) * C::kGateCols + 8 * (4 * cwg + warp) + g;
      uint16_t* o[2] = {p.hout + row0 + (col & ~int64_t(127)) + md::grp_slot(int(col & 127)), nullptr};
      o[1] = o[0] + p.N;
#pragma unroll
      for (int j = 0; j < BT / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (8 * j + h >= lim) continue;
          float gv = acc[4 * j + h] * kScale, uv = acc[4 * j + 2 + h] * kScale;
          if (p.limit > 0.0f) {
            gv = fminf(gv, p.limit);
            uv = fminf(fmaxf(uv, -p.limit), p.limit);
          }
          const float hv = gv / (1.0f + expf(-gv)) * uv;
          *o[h] = __bfloat16_as_ushort(__float2bfloat16_rn(hv));
        }
        o[0] += step;
        o[1] += step;
      }
    } else {
      // yp's rows: fp32 (yout), or (yout16) each value rounded to bf16
      auto store_rows = [&](auto* base, auto convert) {
        decltype(base) o[2] = {base + row0 + int64_t(it.col) * C::BW + 64 * cwg + 16 * warp + g, nullptr};
        o[1] = o[0] + p.N;
#pragma unroll
        for (int j = 0; j < BT / 8; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (8 * j + h >= lim) continue;
            o[h][0] = convert(acc[4 * j + h] * kScale);
            o[h][8] = convert(acc[4 * j + 2 + h] * kScale);
          }
          o[0] += step;
          o[1] += step;
        }
      };
      if (p.yout16) store_rows(p.yout16, [](float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); });
      else store_rows(p.yout, [](float v) { return v; });
    }
  } else {
#pragma unroll
    for (int j = 0; j < BT / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tok = 8 * j + 2 * t + h;
        if (tok >= it.rows) continue;
        const int64_t grow = int64_t(it.rb) + tok;
        if constexpr (kGateUp) {
          float gv = acc[4 * j + h] * kScale, uv = acc[4 * j + 2 + h] * kScale;
          if (p.limit > 0.0f) {
            gv = fminf(gv, p.limit);
            uv = fminf(fmaxf(uv, -p.limit), p.limit);
          }
          const float hv = gv / (1.0f + expf(-gv)) * uv;
          const int64_t col = int64_t(it.col) * C::kGateCols + 8 * (4 * cwg + warp) + g;
          p.hout[grow * p.N + (col & ~int64_t(127)) + md::grp_slot(int(col & 127))] =
              __bfloat16_as_ushort(__float2bfloat16_rn(hv));
        } else {
          const int64_t n = int64_t(it.col) * C::BW + 64 * cwg + 16 * warp + g;
          const float y0 = acc[4 * j + h] * kScale, y1 = acc[4 * j + 2 + h] * kScale;
          if (p.yout16) {
            p.yout16[grow * p.N + n] = __bfloat16_as_ushort(__float2bfloat16_rn(y0));
            p.yout16[grow * p.N + n + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(y1));
          } else {
            p.yout[grow * p.N + n] = y0;
            p.yout[grow * p.N + n + 8] = y1;
          }
        }
      }
  }
}

// Consumer warpgroup cwg: per item the main loop and the epilogue. kFine (MoeGroupedRsArgs::fine_n): wgmma N = the
// tile's rows rounded up to 16, with kHoist (MoeGroupedRsArgs::item_switch) one main loop per shape, picked once per
// item (session 23: no switch per stage; the epilogue stays one copy, 96 registers at cwg 4, no spills), else one
// main loop that picks the shape per stage (session 19; rejected: a switch per wgmma, after which ptxas injects
// warpgroup.arrive before the wgmmas, C7519; one main loop and epilogue per shape, which spilled at cwg 4's 96
// registers); else the session 18 choice, 96 for tiles of <= 96 rows, else 128. kVar: the main loop's code
// (mainloop); kWordStageItem reads the item from the entry the producer wrote beside the slot of its first stage
// (producer kItem) instead of item_of's integer division and two dependent global loads between the epilogue and
// the next item's first wgmma.
template <int kCwg, bool kGateUp, bool kFine, bool kEarly, bool kHoist, MoeGroupedRsVariant kVar>
__device__ __forceinline__ void consumer(const MoeGroupedRsArgs& p, const Smem<kCwg>& sm, int nitems, int ncols,
                                         int nk, int cwg) {
  const int lane = int(threadIdx.x) & 31, warp = (int(threadIdx.x) >> 5) & 3, g = lane >> 2, t = lane & 3;
  const int wrow = cwg * 64 + warp * 16 + g;  // the thread's weight rows wrow, wrow + 8 (smem rows of the item)
  int c = 0;
  auto item = [&](const Item& it) {
    float acc[64];
    if constexpr (kFine && kHoist) {
      switch ((it.rows + 15) >> 4) {
        case 1: c = mainloop<kCwg, 16, kEarly, kVar>(sm, c, nk, 1, wrow, t, acc); break;
        case 2: c = mainloop<kCwg, 32, kEarly, kVar>(sm, c, nk, 2, wrow, t, acc); break;
        case 3: c = mainloop<kCwg, 48, kEarly, kVar>(sm, c, nk, 3, wrow, t, acc); break;
        case 4: c = mainloop<kCwg, 64, kEarly, kVar>(sm, c, nk, 4, wrow, t, acc); break;
        case 5: c = mainloop<kCwg, 80, kEarly, kVar>(sm, c, nk, 5, wrow, t, acc); break;
        case 6: c = mainloop<kCwg, 96, kEarly, kVar>(sm, c, nk, 6, wrow, t, acc); break;
        case 7: c = mainloop<kCwg, 112, kEarly, kVar>(sm, c, nk, 7, wrow, t, acc); break;
        default: c = mainloop<kCwg, 128, kEarly, kVar>(sm, c, nk, 8, wrow, t, acc); break;
      }
    } else if constexpr (kFine) {
      c = mainloop<kCwg, 0, kEarly, kVar>(sm, c, nk, (it.rows + 15) >> 4, wrow, t, acc);
    } else if (it.rows <= 96) c = mainloop<kCwg, 96, false, kVar>(sm, c, nk, 6, wrow, t, acc);
    else c = mainloop<kCwg, 128, false, kVar>(sm, c, nk, 8, wrow, t, acc);
    epilogue<kCwg, kGateUp, kVar == MoeGroupedRsVariant::kWordStageItem>(p, it, cwg, warp, g, t, acc);
  };
  if constexpr (kVar == MoeGroupedRsVariant::kWordStageItem) {
    // the item from the entry the producer wrote at its first stage (c), not from global memory
    for (int w = int(blockIdx.x); w < nitems; w += int(gridDim.x)) {
      mbar_wait(sm.full(c), sm.parity(c));
      const int4 v = *reinterpret_cast<const int4*>(sm.ptr(sm.item(c)));
      item(Item{v.x, v.y, v.z, v.w});
    }
  } else {
    for (int w = int(blockIdx.x); w < nitems; w += int(gridDim.x)) item(item_of(p, w, ncols));
  }
}

// Persistent grid over the items (row tile x column tile, row tile major: the CTAs running at once share A rows).
template <int kCwg, bool kGateUp, bool kFine, bool kEarly, bool kHoist, MoeGroupedRsVariant kVar>
__global__ void __launch_bounds__(Cfg<kCwg>::NT, 1)
    moe_grouped_rs_kernel(const __grid_constant__ MoeGroupedRsArgs p, const __grid_constant__ CUtensorMap amap) {
  using C = Cfg<kCwg>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const Smem<kCwg> sm{smem, smem_u32(smem)};
  if (threadIdx.x == 0) {
    for (int i = 0; i < C::kSlots; ++i) {
      mbar_init(sm.full(i), 128 + 1);     // the producer's 128 cp.async arrivals + thread 0's expect_tx
      mbar_init(sm.empty(i), 128 * kCwg);  // the consumers' threads
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
  }
  __syncthreads();
  const int ncols = int(p.N / (kGateUp ? C::kGateCols : C::BW)), nitems = p.tiles[0] * ncols, nk = int(p.K / BK);
  const int wg = int(threadIdx.x) >> 7;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProd));
    producer<kCwg, kGateUp, kVar == MoeGroupedRsVariant::kWordStageItem>(p, amap, sm, nitems, ncols, nk);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kCons));
    consumer<kCwg, kGateUp, kFine, kEarly, kHoist, kVar>(p, sm, nitems, ncols, nk, wg - 1);
  }
}

// x fp32 [T, K] -> bf16 chunk layout, written to every permuted row pos_of[t * topk + j] >= 0 of xp [rows, K] (one
// thread per 8 consecutive slots of a chunk: x read once, each row written with one 16-byte store). k16: x given
// already rounded to bf16 (the caller's x16, RNE of the same fp32 x): the same values, half the bytes read.
template <bool k16>
__global__ void moe_grouped_xp_kernel(const float* x, const uint16_t* x16, const int32_t* pos_of, int64_t T,
                                      int64_t topk, int64_t K, uint16_t* xp) {
  const int64_t octs = T * K / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < octs; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = 8 * i / K, slot = 8 * i - t * K, chunk = slot & ~int64_t(127);
    const int s = int(slot & 127);
    auto elem = [&](int e) -> uint32_t {
      if constexpr (k16) return x16[t * K + chunk + md::grp_elem(e)];
      else return __bfloat16_as_ushort(__float2bfloat16_rn(x[t * K + chunk + md::grp_elem(e)]));
    };
    uint32_t v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = elem(s + 2 * q) | elem(s + 2 * q + 1) << 16;
    const uint4 w = make_uint4(v[0], v[1], v[2], v[3]);
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t r = pos_of[t * topk + j];
      if (r >= 0) *reinterpret_cast<uint4*>(xp + int64_t(r) * K + slot) = w;
    }
  }
}

// The activation tensor map of a launch: bf16 [rows_a][K], boxes of 64 k x 128 rows with the 128-byte swizzle; rows
// past rows_a read as zero. False if the map cannot be made.
bool make_act_map(const MoeGroupedRsArgs& a, CUtensorMap& map) {
  const cuuint64_t dims[2] = {cuuint64_t(a.K), cuuint64_t(a.rows_a)};
  const cuuint64_t strides[1] = {cuuint64_t(a.K) * 2};
  const cuuint32_t box[2] = {kBox, BT};
  return dsinfer::cuda::encode_tiled_map_128b(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a.a, dims, strides, box);
}

template <int kCwg, bool kGateUp, bool kFine, bool kEarly, bool kHoist,
          MoeGroupedRsVariant kVar = MoeGroupedRsVariant::kSession23>
void launch_cfg(const MoeGroupedRsArgs& a, const CUtensorMap& amap, int64_t max_tiles, cudaStream_t st) {
  using C = Cfg<kCwg>;
  // Above 48 KB of dynamic shared memory needs the opt-in (per device, so on every launch, as the other kernels).
  constexpr int kSmem = kVar == MoeGroupedRsVariant::kWordStageItem ? C::kSmemItem : C::kSmem;
  cudaFuncSetAttribute(moe_grouped_rs_kernel<kCwg, kGateUp, kFine, kEarly, kHoist, kVar>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  static const int sms = [] {
    int dev = 0, n = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
  }();
  const int64_t items = std::max<int64_t>(1, max_tiles * (a.N / (kGateUp ? C::kGateCols : C::BW)));
  const dim3 grid(unsigned(std::clamp<int64_t>(items, 1, sms)));
  moe_grouped_rs_kernel<kCwg, kGateUp, kFine, kEarly, kHoist, kVar><<<grid, C::NT, kSmem, st>>>(a, amap);
}
// early_next and item_switch are compiled with the fine N only (the N 96 / 128 main loop is kept for the bench's
// session 18 variant); MoeGroupedRsArgs::variant with all three on (the plan's launch) only.
template <int kCwg, bool kGateUp>
void launch_variant(const MoeGroupedRsArgs& a, const CUtensorMap& amap, int64_t max_tiles, cudaStream_t st) {
  using V = MoeGroupedRsVariant;
  const bool plan = a.fine_n && a.early_next && a.item_switch;
  if (!a.fine_n) launch_cfg<kCwg, kGateUp, false, false, false>(a, amap, max_tiles, st);
  else if (plan && a.variant == V::kWordStageItem)
    launch_cfg<kCwg, kGateUp, true, true, true, V::kWordStageItem>(a, amap, max_tiles, st);
  else if (plan) launch_cfg<kCwg, kGateUp, true, true, true>(a, amap, max_tiles, st);
  else if (a.early_next) launch_cfg<kCwg, kGateUp, true, true, false>(a, amap, max_tiles, st);
  else if (a.item_switch) launch_cfg<kCwg, kGateUp, true, false, true>(a, amap, max_tiles, st);
  else launch_cfg<kCwg, kGateUp, true, false, false>(a, amap, max_tiles, st);
}

}  // namespace

void launch_moe_grouped_xp(const float* x, const uint16_t* x16, const int32_t* pos_of, int64_t T, int64_t topk,
                           int64_t K, uint16_t* xp, void* stream) {
  const int64_t octs = T * K / 8;
  const unsigned blocks = unsigned(std::clamp<int64_t>((octs + 255) / 256, 1, 132 * 16));
  const auto st = static_cast<cudaStream_t>(stream);
  if (x16) moe_grouped_xp_kernel<true><<<blocks, 256, 0, st>>>(x, x16, pos_of, T, topk, K, xp);
  else moe_grouped_xp_kernel<false><<<blocks, 256, 0, st>>>(x, x16, pos_of, T, topk, K, xp);
}

int moe_grouped_rs_cwg(bool gate_up, int64_t N, int cwg) {
  const int64_t per = gate_up ? 32 * cwg : 64 * cwg;  // h columns (gate/up) or W2 rows (down) per item
  return cwg == 4 && N % per == 0 ? 4 : 2;
}

bool launch_moe_grouped_rs(bool gate_up, const MoeGroupedRsArgs& a, int64_t max_tiles, void* stream) {
  CUtensorMap amap;
  if (!make_act_map(a, amap)) return false;
  const auto st = static_cast<cudaStream_t>(stream);
  const bool four = moe_grouped_rs_cwg(gate_up, a.N, a.cwg) == 4;
  if (gate_up && four) launch_variant<4, true>(a, amap, max_tiles, st);
  else if (gate_up) launch_variant<2, true>(a, amap, max_tiles, st);
  else if (four) launch_variant<4, false>(a, amap, max_tiles, st);
  else launch_variant<2, false>(a, amap, max_tiles, st);
  return true;
}

}  // namespace dsinfer::ops::cuda::detail
