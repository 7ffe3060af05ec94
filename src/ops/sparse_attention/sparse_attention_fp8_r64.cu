// Sparse attention decode over the FP8 KV storage format with FlashMLA's SM90 warpgroup roles (session 24, helper
// s24-sparsed; Fp8AttentionKernel::kRoles64, opt-in: sparse_attention_plan.h). One block of three warpgroups per
// (token, 64-head group, key split), the split partials and combine of the other FP8 kernels, 64-key tiles:
// - warpgroup 0, the producer (144 registers by setmaxnreg): per tile, thread i loads its share of 2 keys' rows
//   straight from global memory into registers (key 8 (i / 32) + i % 8 (+ 32), quarter (i % 32) / 8 of the row: 7 code
//   chunks and 2 RoPE chunks, 9 x 16 bytes, and the row's 8 scale bytes), the next tile's cache rows looked up and tile
//   n + 2's rows prefetched into L2 while they are in flight; then waits for the bf16 key tile slot to be free,
//   dequantises (attn_fp8::dequant16_fast_*, exact) into the slot in wgmma core matrices and signals its `full`
//   mbarrier. No FP8 staging in shared memory: Q (64 KB) + 2 key tiles of 64 keys (128 KB) + P (8 KB) leave no room
//   for one.
// - warpgroup 1, "S" (200 registers): Q K^T of all 64 heads against the tile over all 512 dims (32 wgmma m64n64k16,
//   Q and the key tile from shared memory), the online softmax of the whole tile (no exchange of partial scores), P
//   (bf16) and the rows' rescale factors to shared memory, then O[:, 256:512] += P V (4 wgmma m64n256k16, both
//   operands from shared memory), left in flight while the next tile's Q K^T is issued.
// - warpgroup 2, "V" (160 registers): waits for P, rescales its accumulators, O[:, 0:256] += P V, releases the tile
//   and P.
// Rounding: q and p in bf16, fp32 accumulation, as the other FP8 kernels; but the sums run in another order (one
// 512-dim Q K^T chain instead of two 256-dim halves added; the softmax's running max steps once per 64 keys instead of
// 32), so the bits differ from theirs: the GPU test holds it to the CPU reference at their bound and to the lock-step
// kernel at a derived distance (tests/gpu/test_sparse_attention_fp8_r64_gpu.cpp). Variants (the same bits; bench and
// test): without the L2 prefetch, and persistent (min(items, SMs) blocks looping over items). Not yet run on a GPU.
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16_fast_*, out_rope, kPart
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"
#include "ops/sparse_attention/sparse_attention_mma.cuh"     // rescale_rows, write_rows, pack_bf16
#include "ops/sparse_attention/sparse_attention_wgmma.cuh"   // q_off, the sm90 primitives

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
namespace wg = attn_wgmma;
using attn_fp8::kD;
using attn_fp8::kPart;
using attn_mma::smem_u32;
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::named_arrive;
using ::dsinfer::cuda::sm90::named_sync;

constexpr int kThreads = 384;  // producer, S, V warpgroups
constexpr int kKeys = kFp8R64Keys;
constexpr int kHalf = kD / 2;
constexpr int kSlots = 2;  // bf16 key tiles: the consumers on tile n, the producer writing tile n + 1
constexpr int kProducerRegs = 144, kSRegs = 200, kVRegs = 160;
static_assert(128 * (kProducerRegs + kSRegs + kVRegs) == 384 * 168, "register file");
static_assert(kFp8Heads == 64 && kKeys == 64, "the wgmma shapes assume this tile shape");
static_assert(int(kKvNope) == 448 && int(kKvDataBytes) == 576, "the producer's chunk split assumes the MODEL1 row");

// Byte offsets in dynamic shared memory. Q, a key tile and P are bf16 64-row tiles in 8 x 8 core matrices, the
// layout of attn_wgmma::q_off (core matrix (row group, column group) at (8 column group + row group) * 128 bytes): the
// K-major descriptor of a column step of 16 is (base + 16 * 128 * step, LBO 1024, SBO 128) for all three, and a key
// tile read MN-major (P V) takes (base + 16 keys * 16 bytes * step + dims * 128, LBO 128, SBO 1024).
constexpr size_t kTileBytes = size_t(64) * kD * 2;                // 64 rows x 512 bf16
constexpr size_t kOffQ = 0;
constexpr size_t kOffK = kOffQ + kTileBytes;                      // [kSlots]
constexpr size_t kOffP = kOffK + kSlots * kTileBytes;             // 64 heads x 64 keys bf16
constexpr size_t kOffAlpha = kOffP + size_t(64) * kKeys * 2;     // f32 [64]: a tile's rescale factor of each head
constexpr size_t kOffM = kOffAlpha + 64 * 4;                      // f32 [64]: final max of each head
constexpr size_t kOffL = kOffM + 64 * 4;                          // f32 [64]: final sum
constexpr size_t kOffMask = kOffL + 64 * 4;                       // u64 [kSlots]: present keys of a tile
constexpr size_t kOffBar = kOffMask + kSlots * 8;                 // u64 full[kSlots], empty[kSlots]
constexpr size_t kBytes = kOffBar + 2 * kSlots * 8;
static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kOffBar % 8 == 0 && kOffP % 128 == 0 && kOffK % 128 == 0, "alignment");

// kBarQ: Q written (both consumers); kBarPReady: S -> V, P and its factors of a tile written; kBarPFree: V -> S, read;
// kBarS: S's own warps, P written (its own P V reads all rows); kBarFinal: S -> V, the final max and sum written.
enum NamedBarrier : int { kBarQ = 1, kBarPReady = 2, kBarPFree = 3, kBarS = 4, kBarFinal = 5 };

__device__ __forceinline__ int t_off(int r, int c) { return wg::q_off(r, c); }  // (row, column) in a 64-row tile

// The block's split of token t's keys, cut at 64-key tiles: attn_split_range (split_keys 0, tile 64) in 32-bit
// arithmetic (the launcher checks that a token's keys are < 2^31): its 64-bit divisions are calls, whose clobbers
// spilled the consumers' loop state once the split was cut inside the item loop.
struct Split {  // 32-bit (the launcher's check): the producer keeps it beside 76 registers of loaded rows
  int n0 = 0, n01 = 0, kbeg = 0, nk = 0, ntiles = 0;
};
__device__ __forceinline__ Split split_of(const SparseAttentionFp8Params& p, int64_t t, int split) {
  Split s;
  s.n0 = int(attn_fp8::list_len(p.keys[0], t));
  s.n01 = s.n0 + int(attn_fp8::list_len(p.keys[1], t));
  const uint32_t nkeys = uint32_t(s.n01) + uint32_t(attn_fp8::list_len(p.keys[2], t)), S = uint32_t(p.num_splits);
  const uint32_t per = (nkeys + S - 1) / S;
  const uint32_t per64 = (per + kKeys - 1) / kKeys * kKeys;
  const uint32_t beg = uint32_t(split) * per64 < nkeys ? uint32_t(split) * per64 : nkeys;
  const uint32_t end = beg + per64 > nkeys ? nkeys : beg + per64;
  s.kbeg = int(beg);
  s.nk = int(end - beg);
  s.ntiles = (s.nk + kKeys - 1) / kKeys;
  return s;
}

// The block's work items (token, 64-head group, split), numbered (t G + group) S + split: one item a block (the grid
// (T, G, S): the block's own), or (kPersistent, a grid of min(items, SMs) blocks) items blockIdx.x, + gridDim.x, ...
// Slots and mbarrier phases run on across a block's items, so the producer runs ahead into the next item's first
// tiles while the consumers finish the last one (the epilogue and the next q load overlap them).
// 32-bit: the launcher checks items < 2^31 (the consumers keep an item's fields beside their accumulators).
struct Item {
  int t = 0, group = 0, split = 0;
};
struct Items {
  int first = 0, count = 0, stride = 1;
};
template <bool kPersistent>
__device__ __forceinline__ Items items_of(const SparseAttentionFp8Params& p) {
  Items r;
  r.count = int(p.T) * int(gridDim.y) * int(gridDim.z);
  if constexpr (kPersistent) {
    r.count = int(p.T) * int((p.heads + kFp8Heads - 1) / kFp8Heads) * int(p.num_splits);
    r.first = int(blockIdx.x);
    r.stride = int(gridDim.x);
  } else {
    r.first = (int(blockIdx.x) * int(gridDim.y) + int(blockIdx.y)) * int(gridDim.z) + int(blockIdx.z);
    r.stride = r.count;
  }
  return r;
}
template <bool kPersistent>
__device__ __forceinline__ Item item_at(const SparseAttentionFp8Params& p, int i) {
  Item r;
  if constexpr (kPersistent) {
    const uint32_t S = uint32_t(p.num_splits), G = uint32_t((p.heads + kFp8Heads - 1) / kFp8Heads);
    const uint32_t ts = uint32_t(i) / S;
    r.split = int(uint32_t(i) - ts * S);
    r.t = int(ts / G);
    r.group = int(ts - uint32_t(r.t) * G);
  } else {  // the grid's own: (T, G, S)
    r.t = int(blockIdx.x);
    r.group = int(blockIdx.y);
    r.split = int(blockIdx.z);
  }
  return r;
}

// The producer's key k of the split as (list, cache row) packed in 32 bits: row | list << 30 (rows < 2^30, checked
// by the launcher; list <= 2, so never kNoRow), or kNoRow. Two registers a thread for both keys of a tile instead of
// four pointers (the producer's 144 registers hold 76 of loaded bytes).
constexpr uint32_t kNoRow = 0xffffffffu;
__device__ __forceinline__ uint32_t row_of(const SparseAttentionFp8Params& p, int64_t t, const Split& sp, int64_t k) {
  if (k >= sp.nk) return kNoRow;
  int src = 0;
  const int64_t row = attn_fp8::key_cache_row(p, t, sp.n0, sp.n01, sp.kbeg + k, src);
  return row >= 0 ? uint32_t(row) | (uint32_t(src) << 30) : kNoRow;
}
// Its data and scale bytes (kv_data_offset / kv_scale_offset in 32-bit division: rows and page rows < 2^30).
struct RowPtr {
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;
};
__device__ __forceinline__ RowPtr row_ptr(const SparseAttentionFp8Params& p, uint32_t packed) {
  RowPtr r;
  if (packed != kNoRow) {
    const Fp8KeySource& s = p.keys[packed >> 30];
    const uint32_t row = packed & 0x3fffffffu, pr = uint32_t(s.pages.page_rows);
    const uint32_t page = row / pr, in = row - page * pr;
    const uint8_t* base = s.cache + s.pages.offset + int64_t(page) * s.pages.page_stride;
    r.data = base + int64_t(in) * kKvDataBytes;
    r.scale = base + int64_t(pr) * kKvDataBytes + int64_t(in) * kKvScaleBytes;
  }
  return r;
}

// One key's quarter of a row as the producer thread holds it: code chunks 7 q .. 7 q + 6 (dims 112 q ..), RoPE
// chunks 28 + 2 q, 29 + 2 q (dims 448 + 16 q ..), the 8 scale bytes; zeros for a missing key (which dequantise to
// zeros: code 0 at any scale).
struct Quarter {
  uint4 c[9];
  uint2 sc;
};
__device__ __forceinline__ void load_quarter(const RowPtr& r, int q, Quarter& v) {
  if (r.data != nullptr) {
    const uint4* d = reinterpret_cast<const uint4*>(r.data);
#pragma unroll
    for (int j = 0; j < 7; ++j) v.c[j] = __ldg(d + 7 * q + j);
    v.c[7] = __ldg(d + 28 + 2 * q);
    v.c[8] = __ldg(d + 29 + 2 * q);
    v.sc = __ldg(reinterpret_cast<const uint2*>(r.scale));
  } else {
#pragma unroll
    for (int j = 0; j < 9; ++j) v.c[j] = make_uint4(0, 0, 0, 0);
    v.sc = make_uint2(0, 0);
  }
}
// The quarter into row kr of a bf16 key tile: the 8 lanes of a store phase write 8 rows of one core matrix (128
// contiguous bytes).
__device__ __forceinline__ void store_quarter(const Quarter& v, int q, int kr, __nv_bfloat16* kt) {
#pragma unroll
  for (int j = 0; j < 7; ++j) {
    const int ch = 7 * q + j;
    const uint32_t word = (ch >> 2) < 4 ? v.sc.x : v.sc.y;
    const uint8_t sb = uint8_t(word >> (8 * ((ch >> 2) & 3)));
    uint32_t b[8];
    if (attn_fp8::dequant16_fast_ok(v.c[j], sb)) {
      attn_fp8::dequant16_fast_pairs(v.c[j], sb, b);
    } else {
      attn_fp8::dequant16_bits(v.c[j], sb, b);
    }
    *reinterpret_cast<uint4*>(kt + t_off(kr, 16 * ch)) = make_uint4(b[0], b[1], b[2], b[3]);
    *reinterpret_cast<uint4*>(kt + t_off(kr, 16 * ch + 8)) = make_uint4(b[4], b[5], b[6], b[7]);
  }
  *reinterpret_cast<uint4*>(kt + t_off(kr, int(kKvNope) + 16 * q)) = v.c[7];  // bf16 RoPE channels
  *reinterpret_cast<uint4*>(kt + t_off(kr, int(kKvNope) + 16 * q + 8)) = v.c[8];
}

// Tile m's rows of this thread's keys into L2 (cp.async.bulk.prefetch: no register, no shared memory): quarter q
// prefetches bytes 144 q .. 144 q + 143 of the 576 data bytes, quarter 0 also the scale bytes' line.
__device__ __forceinline__ void prefetch_rows(const SparseAttentionFp8Params& p, int64_t t, const Split& sp, int64_t m,
                                              int kr0, int q) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const RowPtr rp = row_ptr(p, row_of(p, t, sp, m * kKeys + kr0 + 32 * r));
    if (rp.data == nullptr) continue;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], 144;\n" ::"l"(rp.data + 144 * q) : "memory");
    if (q == 0) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(rp.scale) : "memory");
  }
}

// Warpgroup 0: every tile of the split into the bf16 key tiles (the kernel's comment). kPrefetch: tile n + 2's rows
// are prefetched into L2 while tile n is in flight, so that the loads of a tile (issued only after the previous
// tile's dequantisation: its registers) find them in L2 (~2x less latency than HBM; 2 tiles of 37 KB a block ahead,
// 10 MB over 132 SMs against the 50 MB L2).
// One item's tiles; gn: the block's tiles so far (slot gn % kSlots, phase (gn / kSlots) & 1), advanced.
template <bool kPrefetch>
__device__ __forceinline__ void produce_item(const SparseAttentionFp8Params& p, int64_t t, const Split& sp,
                                             __nv_bfloat16* kb, uint8_t* maskb, uint32_t full0, uint32_t empty0,
                                             int& gn) {
  uint32_t tid;  // through a volatile asm, as in consumer_start: the store offsets are not hoisted out of the item loop
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  const int i = int(tid), w = i >> 5, lane = i & 31, q = lane >> 3;
  const int kr0 = 8 * w + (lane & 7), kr1 = kr0 + 32;
  uint32_t r0 = row_of(p, t, sp, kr0), r1 = row_of(p, t, sp, kr1);
  const int ntiles = int(sp.ntiles);
  if (kPrefetch && ntiles > 1) prefetch_rows(p, t, sp, 1, kr0, q);
  for (int n = 0; n < ntiles; ++n, ++gn) {
    Quarter v0, v1;
    load_quarter(row_ptr(p, r0), q, v0);
    load_quarter(row_ptr(p, r1), q, v1);
    const bool ok0 = r0 != kNoRow, ok1 = r1 != kNoRow;
    r0 = row_of(p, t, sp, int64_t(n + 1) * kKeys + kr0);  // the next tile's rows, looked up while this one is in flight
    r1 = row_of(p, t, sp, int64_t(n + 1) * kKeys + kr1);
    if (kPrefetch && n + 2 < ntiles) prefetch_rows(p, t, sp, n + 2, kr0, q);
    const int slot = gn % kSlots;
    if (gn >= kSlots) mbar_wait(empty0 + 8 * slot, uint32_t(((gn / kSlots) - 1) & 1));
    __nv_bfloat16* kt = kb + slot * (kTileBytes / 2);
    store_quarter(v0, q, kr0, kt);
    store_quarter(v1, q, kr1, kt);
    const uint32_t b0 = __ballot_sync(dev::kFull, ok0), b1 = __ballot_sync(dev::kFull, ok1);
    if (lane == 0) {  // bits of keys 8 w .. 8 w + 7 (lanes 0 .. 7) and 8 w + 32 ..
      maskb[8 * slot + w] = uint8_t(b0 & 0xffu);
      maskb[8 * slot + w + 4] = uint8_t(b1 & 0xffu);
    }
    wg::fence_proxy_async();  // the tile's generic-proxy writes, before the consumers' wgmma read them
    mbar_arrive(full0 + 8 * slot);
  }
}

// Consumers (256 threads, ct = 0 .. 255): q rows h0 .. h0 + 63 of token t -> Q's core matrices (zero rows for heads >=
// H). Item i: head (i % 8) + 8 ((i / 32) % 8), dims 8 ((i / 8) % 4 + 4 (i / 256)): 8 lanes write the 8 rows of a core
// matrix, and each thread's 16 loads are independent: unrolled by 8 (two latencies, not 16; by 16 the fp32 loads in
// flight, 128 registers, were over V's budget: setmaxnreg was dropped).
template <bool kBf16>
__device__ __forceinline__ void load_q(const void* q, int64_t t, int64_t h0, int64_t H, int ct, __nv_bfloat16* qs) {
#pragma unroll 8
  for (int i = ct; i < kFp8Heads * kD / 8; i += 256) {
    const int r = (i & 7) + 8 * ((i >> 5) & 7);
    const int c8 = ((i >> 3) & 3) + 4 * (i >> 8);
    *reinterpret_cast<uint4*>(qs + t_off(r, 8 * c8)) = attn_fp8::q_chunk<kBf16>(q, t, h0 + r, H, c8);
  }
}

// The online softmax of a 64-key tile for the lane's two rows (attn_mma::softmax_tile's algorithm on 8 n8 blocks): on
// return s holds p (rounded to bf16), alpha the old accumulator's factor; m stays in natural units of the scaled score
// (the combine's). Arithmetic: the row max of the raw scores times scale (scale > 0, checked by the launcher: the same
// value as the max of the scaled scores, rounding being monotonic), then p = 2^(s * (scale log2 e) - m log2 e), one
// FFMA and one ex2.approx.ftz a key (attn_mma::softmax_tile: a multiply, a subtract and expf's ~8 instructions):
// relative error ~2^-22 (and p < 2^-126 flushed to 0 against a row sum >= 1), far under p's bf16 rounding; this
// kernel's bits are its own anyway. Key of s[j][e]: 8 j + 2 q4 + (e & 1).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ void softmax64(float (&s)[8][4], uint64_t valid, float scale, float (&m)[2], float (&l)[2],
                                          float (&alpha)[2]) {
  const int q4 = threadIdx.x & 3;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * j + 2 * q4 + (e & 1);
      s[j][e] = (valid >> key) & 1u ? s[j][e] : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    }
  float mnew[2], ml[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // the four lanes of a row are q4 = 0..3 of one g
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 2));
    mnew[r] = fmaxf(m[r], mx[r] * scale);
    alpha[r] = mnew[r] != -INFINITY ? ex2((m[r] - mnew[r]) * kLog2e) : 1.0f;
    ml[r] = mnew[r] * kLog2e;
  }
  const float sl = scale * kLog2e;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float pe =
          mnew[r] != -INFINITY ? __bfloat162float(__float2bfloat16_rn(ex2(fmaf(s[j][e], sl, -ml[r])))) : 0.0f;
      s[j][e] = pe;
      sum[r] += pe;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(dev::kFull, sum[r], 1);
    sum[r] += __shfl_xor_sync(dev::kFull, sum[r], 2);
    l[r] = l[r] * alpha[r] + sum[r];
    m[r] = mnew[r];
  }
}

// O[:, d0 .. d0 + 255] += P V over a 64-key tile (4 k16 steps), P and the key tile (at ks) from shared memory; issued
// and committed, left in flight.
__device__ __forceinline__ void pv_issue(uint32_t ps, uint32_t ks, int d0, float (&acc)[32][4]) {
  wg::wgmma_fence_regs(acc);
  wg::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wg::wgmma_m64n256k16_ss(acc, wg::wgmma_desc(ps + uint32_t(kk) * 2048u, 1024u, 128u),
                        wg::wgmma_desc(ks + uint32_t(d0) * 128u + uint32_t(kk) * 256u, 128u, 1024u));
  wg::wgmma_commit();
}

// The block's dynamic shared memory (every extern __shared__ array names the same bytes; a constant address, so the
// consumers keep no pointers into it in registers).
extern __shared__ __align__(1024) unsigned char r64_smem[];
__device__ __forceinline__ __nv_bfloat16* smem_bf16(size_t off) {
  return reinterpret_cast<__nv_bfloat16*>(r64_smem + off);
}
__device__ __forceinline__ float* smem_f32(size_t off) { return reinterpret_cast<float*>(r64_smem + off); }
__device__ __forceinline__ uint32_t smem_at(size_t off) { return smem_u32(r64_smem) + uint32_t(off); }

// Item im's q (both consumer warpgroups load it, ct = 0 .. 255), zeroed accumulators. Q is free: S's last Q K^T of
// the previous item completed before S arrived on kBarFinal, which V waited for before coming here.
template <bool kQBf16>
__device__ __forceinline__ void consumer_start(const SparseAttentionFp8Params& p, const void* q, const Item& im,
                                               float (&acc)[32][4]) {
  // %tid.x through a volatile asm: the q load's 16 address offsets are then computed per item instead of hoisted out
  // of the persistent item loop (where they held 32 registers across it and spilled V's budget).
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  load_q<kQBf16>(q, im.t, int64_t(im.group) * kFp8Heads, p.heads, int(tid) - 128, smem_bf16(kOffQ));
  wg::fence_proxy_async();
  named_sync(kBarQ, 256);
#pragma unroll
  for (int nt = 0; nt < 32; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  wg::wgmma_fence_regs(acc);
}

// Item im's output rows of this warp's 16 heads (attn_mma::write_rows), dims d0 .., with the inverse RoPE where kRope:
// only S's dims (256 .. 511) hold RoPE channels (the launcher takes rope_dim <= 256), so V's code has no call to the
// RoPE's double-precision slow path: ptxas 13.0 crashed on such calls under two setmaxnreg budgets, and V's epilogue
// with them needed more than its 160 (144 + 200 + 160 fill the register file).
template <bool kRope>
__device__ __forceinline__ void consumer_end(const SparseAttentionFp8Params& p, const Item& im, int d0,
                                             const float (&acc)[32][4], const float (&m)[2], const float (&l)[2],
                                             float* o, float* ws) {
  const int64_t hr = int64_t(im.group) * kFp8Heads + 16 * ((threadIdx.x >> 5) & 3);
  const int64_t pos = kRope && p.rope_dim > 0 ? int64_t(p.pos[im.t]) : 0;
  attn_mma::write_rows(acc, m, l, hr, d0, im.t, im.split, p.heads, p.num_splits, kD, kPart, p.num_splits == 1,
                       p.sinks, o, ws, [&](float& e0, float& e1, int d) {
                         if constexpr (kRope) attn_fp8::out_rope(e0, e1, d, p, pos);
                       });
}

// Warpgroup 1, S, one item: Q K^T, the softmax, P, O[:, 256:512] (the RoPE channels: its epilogue alone calls
// out_rope); gn: the block's tiles so far (the producer's slots and phases), advanced.
template <bool kQBf16>
__device__ __forceinline__ void s_item(const SparseAttentionFp8Params& p, const void* q, const Item& im, float* o,
                                       float* ws, int& gn) {
  const int hr = 16 * ((threadIdx.x >> 5) & 3), g = (threadIdx.x & 31) >> 2, q4 = threadIdx.x & 3;
  {
    const int ntiles = int(split_of(p, im.t, im.split).ntiles);
    float acc[32][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    consumer_start<kQBf16>(p, q, im, acc);
    for (int n = 0; n < ntiles; ++n, ++gn) {
      const int slot = gn % kSlots;
      const uint32_t ks = smem_at(kOffK) + uint32_t(slot) * uint32_t(kTileBytes);
      mbar_wait(smem_at(kOffBar) + 8 * slot, uint32_t((gn / kSlots) & 1));
      float s[8][4];
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 32; ++kk)
        wg::wgmma_m64n64k16_ss(s, wg::wgmma_desc(smem_at(kOffQ) + uint32_t(kk) * 2048u, 1024u, 128u),
                           wg::wgmma_desc(ks + uint32_t(kk) * 2048u, 1024u, 128u), kk > 0 ? 1 : 0);
      wg::wgmma_commit();
      wg::wgmma_wait<0>();  // this tile's Q K^T and the previous tile's P V
      wg::wgmma_fence_regs(s);
      wg::wgmma_fence_regs(acc);
      if (n > 0) {
        mbar_arrive(smem_at(kOffBar) + 8 * (kSlots + (gn - 1) % kSlots));  // this warpgroup is done with tile n - 1
        named_sync(kBarPFree, 256);  // and V has read P and the factors of tile n - 1
      }
      const uint64_t valid = *reinterpret_cast<const uint64_t*>(r64_smem + kOffMask + 8 * slot);
      float alpha[2];
      softmax64(s, valid, p.scale, m, l, alpha);
      __nv_bfloat16* pb = smem_bf16(kOffP);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<uint32_t*>(pb + t_off(hr + g, 8 * j + 2 * q4)) = attn_mma::pack_bf16(s[j][0], s[j][1]);
        *reinterpret_cast<uint32_t*>(pb + t_off(hr + g + 8, 8 * j + 2 * q4)) = attn_mma::pack_bf16(s[j][2], s[j][3]);
      }
      if (q4 == 0) {
        smem_f32(kOffAlpha)[hr + g] = alpha[0];
        smem_f32(kOffAlpha)[hr + g + 8] = alpha[1];
      }
      wg::fence_proxy_async();        // P's generic-proxy writes, before both warpgroups' wgmma read them
      named_arrive(kBarPReady, 256);  // to V
      named_sync(kBarS, 128);         // this warpgroup's own P V reads the other warps' rows of P too
      attn_mma::rescale_rows(acc, alpha);
      pv_issue(smem_at(kOffP), ks, kHalf, acc);  // in flight while the next tile's Q K^T is issued
    }
    // Unconditional: behind `if (ntiles > 0)` ptxas saw a path to the epilogue with a wgmma in flight and serialised
    // every wgmma of the kernel (C7514).
    wg::wgmma_wait<0>();
    wg::wgmma_fence_regs(acc);
    if (ntiles > 0) mbar_arrive(smem_at(kOffBar) + 8 * (kSlots + (gn - 1) % kSlots));
    if (q4 == 0) {
      smem_f32(kOffM)[hr + g] = m[0];
      smem_f32(kOffM)[hr + g + 8] = m[1];
      smem_f32(kOffL)[hr + g] = l[0];
      smem_f32(kOffL)[hr + g + 8] = l[1];
    }
    named_arrive(kBarFinal, 256);
    consumer_end<true>(p, im, kHalf, acc, m, l, o, ws);
  }
}

// Warpgroup 2, V, one item: O[:, 0:256] from S's P and factors (and the partials' max and sum: write_rows's dims-0
// rows).
template <bool kQBf16>
__device__ __forceinline__ void v_item(const SparseAttentionFp8Params& p, const void* q, const Item& im, float* o,
                                       float* ws, int& gn) {
  const int hr = 16 * ((threadIdx.x >> 5) & 3), g = (threadIdx.x & 31) >> 2;
  {
    const int ntiles = int(split_of(p, im.t, im.split).ntiles);
    float acc[32][4];
    consumer_start<kQBf16>(p, q, im, acc);
    for (int n = 0; n < ntiles; ++n, ++gn) {
      const int slot = gn % kSlots;
      named_sync(kBarPReady, 256);  // P and the factors of tile n (S waited for tile n's full barrier before)
      const float alpha[2] = {smem_f32(kOffAlpha)[hr + g], smem_f32(kOffAlpha)[hr + g + 8]};
      attn_mma::rescale_rows(acc, alpha);
      pv_issue(smem_at(kOffP), smem_at(kOffK) + uint32_t(slot) * uint32_t(kTileBytes), 0, acc);
      wg::wgmma_wait<0>();
      wg::wgmma_fence_regs(acc);
      mbar_arrive(smem_at(kOffBar) + 8 * (kSlots + slot));
      if (n + 1 < ntiles) named_arrive(kBarPFree, 256);
    }
    wg::wgmma_wait<0>();  // (nothing in flight; for ptxas, as in S)
    wg::wgmma_fence_regs(acc);
    named_sync(kBarFinal, 256);
    const float m[2] = {smem_f32(kOffM)[hr + g], smem_f32(kOffM)[hr + g + 8]};
    const float l[2] = {smem_f32(kOffL)[hr + g], smem_f32(kOffL)[hr + g + 8]};
    consumer_end<false>(p, im, 0, acc, m, l, o, ws);
  }
}

template <bool kQBf16, bool kPrefetch, bool kPersistent>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_fp8_r64_kernel(SparseAttentionFp8Params p, const void* q, float* o, float* ws) {
  const uint32_t full0 = smem_at(kOffBar), empty0 = full0 + 8 * kSlots;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i) {
      mbar_init(full0 + 8 * i, 128);
      mbar_init(empty0 + 8 * i, 256);
    }
  }
  __syncthreads();
  // One item (the grid's own: straight-line code, as ptxas fits it in the budgets below with no spill), or the
  // persistent loop over the block's items. Each role reads its items after its setmaxnreg: nothing lives across.
  int gn = 0;
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if constexpr (kPersistent) {
      const Items items = items_of<true>(p);
      for (int it = items.first; it < items.count; it += items.stride) {
        const Item im = item_at<true>(p, it);
        produce_item<kPrefetch>(p, im.t, split_of(p, im.t, im.split), smem_bf16(kOffK), r64_smem + kOffMask, full0,
                                empty0, gn);
      }
    } else {
      produce_item<kPrefetch>(p, blockIdx.x, split_of(p, blockIdx.x, blockIdx.z), smem_bf16(kOffK),
                              r64_smem + kOffMask, full0, empty0, gn);
    }
  } else if (threadIdx.x < 256) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kSRegs));
    if constexpr (kPersistent) {
      const Items items = items_of<true>(p);
      for (int it = items.first; it < items.count; it += items.stride)
        s_item<kQBf16>(p, q, item_at<true>(p, it), o, ws, gn);
    } else {
      s_item<kQBf16>(p, q, item_at<false>(p, 0), o, ws, gn);
    }
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kVRegs));
    if constexpr (kPersistent) {
      const Items items = items_of<true>(p);
      for (int it = items.first; it < items.count; it += items.stride)
        v_item<kQBf16>(p, q, item_at<true>(p, it), o, ws, gn);
    } else {
      v_item<kQBf16>(p, q, item_at<false>(p, 0), o, ws, gn);
    }
  }
}

template <bool kQBf16, bool kPrefetch, bool kPersistent>
void launch_kernel(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  auto* kernel = sparse_attention_fp8_r64_kernel<kQBf16, kPrefetch, kPersistent>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBytes));
  const int64_t groups = (p.heads + kFp8Heads - 1) / kFp8Heads;
  if constexpr (kPersistent) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t items = p.T * groups * p.num_splits;
    kernel<<<unsigned(items < sms ? items : sms), kThreads, kBytes, s>>>(p, q, o, workspace);
  } else {
    const dim3 grid(unsigned(p.T), unsigned(groups), unsigned(p.num_splits));
    kernel<<<grid, kThreads, kBytes, s>>>(p, q, o, workspace);
  }
}

template <bool kPrefetch, bool kPersistent>
void launch_q(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  if (p.q_bf16) {
    launch_kernel<true, kPrefetch, kPersistent>(p, q, o, workspace, s);
  } else {
    launch_kernel<false, kPrefetch, kPersistent>(p, q, o, workspace, s);
  }
}
}  // namespace

void launch_sparse_attention_fp8_r64(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                     void* stream) {
  launch_sparse_attention_fp8_r64_variant(p, q, o, workspace, kR64Prefetch, stream);
}

bool launch_sparse_attention_fp8_r64_variant(const SparseAttentionFp8Params& p, const void* q, float* o,
                                             float* workspace, int variant, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case kR64Prefetch: launch_q<true, false>(p, q, o, workspace, s); break;
    case kR64NoPrefetch: launch_q<false, false>(p, q, o, workspace, s); break;
    case kR64Persistent: launch_q<true, true>(p, q, o, workspace, s); break;
    default: return false;
  }
  return true;
}

}  // namespace dsinfer::ops::cuda::detail
