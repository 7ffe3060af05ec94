// Sparse attention over the FP8 KV storage format, warp-specialised (session 17; the design of docs/decisions.md,
// 2026-12-03 session 16, after FlashMLA's SM90 sparse kernels). One block of three warpgroups per (token, 64-head
// group, key split), the grid, tiles, splits and partials of the lock-step kernel (sparse_attention_fp8.cu):
// - warpgroup 0, the producer (56 registers by setmaxnreg): gathers the keys of tile n + 2 (32 rows of 584 bytes,
//   cp.async, thread i: key i / 4) into a ring of 3 FP8 stages, dequantises tile n (e4m3 x UE8M0 -> bf16, exact) once
//   for all 64 heads into one of 2 bf16 key tiles in wgmma core matrices (sparse_attention_wgmma.cuh's layout), and
//   signals it on the tile's `full` mbarrier;
// - warpgroups 1 and 2, the consumers (224 registers): warpgroup c owns output dims 256 c .. 256 c + 255 (64 x 256
//   fp32 accumulators, 128 a thread). A tile: Q K^T over its 256 dims (16 wgmma m64n32k16, Q and the key tile from
//   shared memory), partial scores exchanged with the other consumer through shared memory (double-buffered: one
//   named barrier of the 256 consumer threads a tile), the online softmax (p rounded to bf16), O += P V (2 wgmma
//   m64n256k16, P from registers, the key tile read MN-major), left in flight while the next tile's Q K^T is issued;
//   the key tile goes back to the producer on its `empty` mbarrier once both have completed.
// Every product, sum and rounding is the lock-step kernel's (its probe kProbeWgmma showed wgmma k16 steps round as
// mma.sync's): the output is bitwise the lock-step kernel's, which the GPU test asserts.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/ops_device.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16, out_rope, kPart
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"
#include "ops/sparse_attention/sparse_attention_launch.h"  // attn_split_range
#include "ops/sparse_attention/sparse_attention_mma.cuh"     // softmax_tile, write_rows
#include "ops/sparse_attention/sparse_attention_wgmma.cuh"   // the wgmma products and the core-matrix layout

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
namespace wg = attn_wgmma;
using attn_fp8::kChunksPerKey;
using attn_fp8::kD;
using attn_fp8::kData;
using attn_fp8::kPart;
using attn_mma::smem_u32;

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kKeys = kFp8Keys;
constexpr int kHalf = kD / 2;
// setmaxnreg: the producer gives back registers the consumers take (96 x 128 + 200 x 256 <= 168 x 384, the launch's).
// ptxas keeps the producer's code within 96 (72 spilled the item loop's state) and the whole kernel within 168.
constexpr int kProducerRegs = 96, kConsumerRegs = 200;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 168 * kThreads, "register file");
static_assert(kFp8Heads == 64 && kKeys == 32, "the wgmma shapes assume this tile shape");
constexpr int kStageBytes = kKeys * kData + kKeys * 8;  // 32 data rows, then 32 x 8 scale bytes
constexpr size_t kTileBytes = size_t(kKeys) * kD * 2;   // a bf16 key tile, 32 x 512 in core matrices

// A pipeline shape and its shared memory (byte offsets): S FP8 stages (tiles n + 1 .. n + S - 1 in flight while n is
// dequantised), R bf16 key tiles (the producer may run R - 1 tiles ahead of the consumers), X score-exchange
// buffers (2: one named barrier a tile; 1: a second barrier before the buffer is written again). The 227 KB allow
// (3, 2, 2), the kernel's, (2, 3, 1), a deeper key ring, or (4, 2, 1), a deeper FP8 ring (bench variants).
template <int S, int R, int X>
struct Ws {
  static constexpr int kStages = S, kKeyTiles = R, kXBufs = X;
  static constexpr size_t kOffQ = 0;                                          // bf16 64 x 512, core matrices
  static constexpr size_t kOffK = kOffQ + size_t(kFp8Heads) * kD * 2;        // bf16 [R] key tiles
  static constexpr size_t kOffStage = kOffK + R * kTileBytes;                 // [S] stages
  static constexpr size_t kOffX = kOffStage + size_t(S) * kStageBytes;        // f32 [X][2 consumers][4 warps][512]
  static constexpr size_t kOffFlag = kOffX + size_t(X * 2 * 4 * 512) * 4;     // u8 [S][32]: key present
  static constexpr size_t kOffMask = kOffFlag + 128;                          // u32 [R]: present keys of a tile
  static constexpr size_t kOffBar = kOffMask + 16;                            // u64 full[R], empty[R]
  static constexpr size_t kBytes = kOffBar + 2 * R * 8;
  static_assert(S >= 2 && S <= 4 && R >= 2 && R <= 4 && (X == 1 || X == 2), "flag, mask and barrier room");
  static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
  static_assert(kOffBar % 8 == 0 && kOffStage % 16 == 0 && kOffX % 16 == 0, "alignment");
};
using WsKernel = Ws<3, 2, 2>;
using WsDeep = Ws<2, 3, 1>;
using WsWide = Ws<4, 2, 1>;  // more rows in flight (decode: HBM latency)

enum NamedBarrier : int { kBarProducer = 1, kBarExchange = 2, kBarQ0 = 3 };  // kBarQ0 + c: consumer c's Q half
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// The block's split of token t's keys, as the lock-step kernel cuts it.
struct Split {
  int64_t n0 = 0, n01 = 0, kbeg = 0, nk = 0, ntiles = 0;
};
__device__ __forceinline__ Split split_of(const SparseAttentionFp8Params& p, int64_t t, int64_t split) {
  Split s;
  s.n0 = attn_fp8::list_len(p.keys[0], t);
  s.n01 = s.n0 + attn_fp8::list_len(p.keys[1], t);
  const int64_t nkeys = s.n01 + attn_fp8::list_len(p.keys[2], t);
  int64_t kend = 0;
  attn_split_range(nkeys, split, p.num_splits, 0, kKeys, s.kbeg, kend);
  s.nk = kend > s.kbeg ? kend - s.kbeg : 0;
  s.ntiles = (s.nk + kKeys - 1) / kKeys;
  return s;
}

// Producer: the list entry of this thread's key (i / 4) of tile m: its list `src` and cache row as stored (-1: none,
// past the split's end included). Loaded a tile before its issue, so the index load's latency overlaps a
// dequantisation instead of stalling the producer (the loaded value is first used by issue_tile).
struct KeyRef {
  int32_t row = -1;
  int src = 0;
};
__device__ __forceinline__ KeyRef key_ref(const SparseAttentionFp8Params& p, int64_t t, const Split& sp, int64_t m) {
  KeyRef r;
  const int64_t k = m * kKeys + (threadIdx.x >> 2);
  if (m < sp.ntiles && k < sp.nk) {
    const int64_t kk = sp.kbeg + k;
    r.src = kk < sp.n0 ? 0 : (kk < sp.n01 ? 1 : 2);
    const Fp8KeySource& s = p.keys[r.src];
    const int64_t j = r.src == 0 ? kk : (r.src == 1 ? kk - sp.n0 : kk - sp.n01);
    r.row = s.idx[t * s.stride + j];
  }
  return r;
}

// Producer: tile m's rows into stage m % kStages (one commit group, empty past the split's end). Thread i copies key
// i / 4's chunks i % 4, i % 4 + 4, .. (the 4 threads of a key read 64 contiguous bytes at a time) and, for i % 4 == 0,
// its 8 scale bytes and its presence flag. key: key_ref(.., m).
template <int kStages>
__device__ __forceinline__ void issue_tile(const SparseAttentionFp8Params& p, const Split& sp, int64_t m,
                                           const KeyRef& key, uint8_t* stages, uint8_t* flags) {
  const int i = threadIdx.x, kr = i >> 2, kq = i & 3;
  if (m < sp.ntiles) {
    uint8_t* dst = stages + (m % kStages) * kStageBytes;
    const Fp8KeySource& s = p.keys[key.src];
    const bool present = key.row >= 0 && key.row < s.rows;
    if (kq == 0) flags[(m % kStages) * kKeys + kr] = present ? 1 : 0;
    if (present) {
      const uint8_t* data = s.cache + kv_data_offset(s.pages, key.row);
      const uint8_t* scale = s.cache + kv_scale_offset(s.pages, key.row);
#pragma unroll
      for (int j = kq; j < kChunksPerKey; j += 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst + kr * kData + 16 * j)),
                     "l"(data + 16 * j)
                     : "memory");
      if (kq == 0)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst + kKeys * kData + 8 * kr)),
                     "l"(scale)
                     : "memory");
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Producer: stage n % kStages -> the bf16 key tile (core matrices); zero rows for missing keys. Chunk c is key
// r = 8 ((c / 8) % 4) + c % 8, chunk ((c / 32) + (c % 8) / 2) % 36 of it: the 8 threads of a 16-byte access phase
// read 8 keys 576 bytes apart at 8 different bank groups and write 8 rows of one core matrix (as the lock-step
// kernel's kProbeWgmma mapping).
__device__ __forceinline__ void dequant_tile(const uint8_t* stage, const uint8_t* flags, __nv_bfloat16* ks) {
  static_assert(kKeys * kChunksPerKey % 128 == 0, "whole rounds of the producer warpgroup");
#pragma unroll 3
  for (int it = 0; it < kKeys * kChunksPerKey / 128; ++it) {
    const int c = int(threadIdx.x) + 128 * it;
    const int i = c & 7, j = c >> 3;
    const int r = 8 * (j & 3) + i;
    const int ch = ((j >> 2) + (i >> 1)) % kChunksPerKey;
    const bool nope = ch < int(kKvNope) / 16;
    // NoPE chunk ch: dims 16 ch .. + 15; RoPE chunk: 8 bf16 at dims kKvNope + 8 (ch - 28).
    const int d = nope ? 16 * ch : int(kKvNope) + 8 * (ch - int(kKvNope) / 16);
    __nv_bfloat16* lo = ks + wg::k_off(r, d);
    __nv_bfloat16* hi = ks + wg::k_off(r, d + 8);
    if (!flags[r]) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(lo) = z;
      if (nope) *reinterpret_cast<uint4*>(hi) = z;
      continue;
    }
    const uint4 v = *reinterpret_cast<const uint4*>(stage + r * kData + 16 * ch);
    if (nope) {
      attn_fp8::dequant16(v, stage[kKeys * kData + 8 * r + ch / 4], lo, hi);
    } else {
      *reinterpret_cast<uint4*>(lo) = v;  // bf16 RoPE channels
    }
  }
}

// Consumer c: q rows h0 .. h0 + 63, dims 256 c .., of token t -> Q's core matrices (zero rows for heads >= H). A warp
// takes 8 heads x 4 dim groups: 8 lanes write the 8 rows of one core matrix, 128 contiguous bytes a head.
template <bool kBf16>
__device__ __forceinline__ void load_q_half(const void* q, int64_t t, int64_t h0, int64_t H, int c, int ct,
                                            __nv_bfloat16* qs) {
#pragma unroll 4
  for (int i = ct; i < kFp8Heads * kHalf / 8; i += 128) {
    const int r = (i & 7) + 8 * ((i >> 5) & 7);
    const int c8 = ((i >> 3) & 3) + 4 * (i >> 8) + (kHalf / 8) * c;
    const int64_t h = h0 + r;
    uint4 out = make_uint4(0, 0, 0, 0);
    if (h < H) {
      if (kBf16) {
        out = __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(q) + (t * H + h) * kD) + c8);
      } else {
        const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(q) + (t * H + h) * kD) + 2 * c8;
        const float4 a = __ldg(src), b = __ldg(src + 1);
        out = make_uint4(attn_mma::pack_bf16(a.x, a.y), attn_mma::pack_bf16(a.z, a.w), attn_mma::pack_bf16(b.x, b.y),
                         attn_mma::pack_bf16(b.z, b.w));
      }
    }
    *reinterpret_cast<uint4*>(qs + wg::q_off(r, 8 * c8)) = out;
  }
}

// s (64 x 32 fp32) (+)= A (64 heads x 16 dims) * B (32 keys x 16 dims)^T, both K-major from shared memory; accumulate
// 0: s = A B^T (the first k16 step: no instruction writes s while the previous tile's P V is in flight, which would
// make ptxas serialise the wgmma).
__device__ __forceinline__ void wgmma_qk(float (&s)[4][4], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(s[0][0]), "+f"(s[0][1]), "+f"(s[0][2]), "+f"(s[0][3]), "+f"(s[1][0]), "+f"(s[1][1]), "+f"(s[1][2]),
        "+f"(s[1][3]), "+f"(s[2][0]), "+f"(s[2][1]), "+f"(s[2][2]), "+f"(s[2][3]), "+f"(s[3][0]), "+f"(s[3][1]),
        "+f"(s[3][2]), "+f"(s[3][3])
      : "l"(da), "l"(db), "r"(accumulate));
}

// Consumer: Q K^T of the warpgroup's 64 heads against a key tile over dims d0 .. d0 + 255, issued (16 k16 steps, one
// commit group); s must not be read before the group completes. The same k16 steps in the same order as
// attn_wgmma::qk_wg (which adds the first to zeros: the same sums).
__device__ __forceinline__ void qk_issue(uint32_t qs, uint32_t ks, int d0, float (&s)[4][4]) {
  wg::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const uint32_t d = uint32_t(d0 + 16 * kk);
    wgmma_qk(s, wg::desc(qs + d * 128u, 1024u, 128u), wg::desc(ks + d * 64u, 512u, 128u), kk > 0 ? 1 : 0);
  }
  wg::wgmma_commit();
}

// Work items: (token, 64-head group, split), item = t + T (group + groups * split) (the grid's x-fastest order).
// kPersistent: a grid of at most one block an SM walks items blockIdx.x, + gridDim.x, ..; the producer starts an
// item's rows while the consumers finish the previous item's last tile and epilogue. Otherwise one block an item.
// Both roles count the tiles of the block's items (kt), so the key-tile ring and its mbarrier phases run on.
template <bool kQBf16, class C, bool kPersistent>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_fp8_ws_kernel(SparseAttentionFp8Params p, const void* q, float* o, float* ws) {
  constexpr int kStages = C::kStages, kKeyTiles = C::kKeyTiles;
  constexpr size_t kOffQ = C::kOffQ, kOffK = C::kOffK, kOffStage = C::kOffStage, kOffX = C::kOffX;
  constexpr size_t kOffFlag = C::kOffFlag, kOffMask = C::kOffMask, kOffBar = C::kOffBar;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
  uint8_t* stages = smem + kOffStage;
  float* sx = reinterpret_cast<float*>(smem + kOffX);
  uint8_t* flags = smem + kOffFlag;
  uint32_t* mask = reinterpret_cast<uint32_t*>(smem + kOffMask);
  const uint32_t full0 = smem_u32(smem + kOffBar), empty0 = full0 + 8 * kKeyTiles;
  const int64_t groups = (p.heads + kFp8Heads - 1) / kFp8Heads, nitems = p.T * groups * p.num_splits;
  const int64_t first = kPersistent ? int64_t(blockIdx.x) : blockIdx.x + p.T * (blockIdx.y + groups * blockIdx.z);
  const int64_t step = kPersistent ? int64_t(gridDim.x) : nitems;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kKeyTiles; ++i) {
      mbar_init(full0 + 8 * i, 128);   // every producer thread, after its writes
      mbar_init(empty0 + 8 * i, 256);  // every consumer thread, after its products read the tile
    }
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    int64_t kt0 = 0;  // key tiles produced for earlier items
    for (int64_t item = first; item < nitems; item += step) {
      const int64_t t = item % p.T, split = item / p.T / groups;
      const Split sp = split_of(p, t, split);
      named_sync(kBarProducer, 128);  // every producer is past the previous item's last dequantisation: stages free
      for (int64_t m = 0; m < kStages - 1; ++m) issue_tile<kStages>(p, sp, m, key_ref(p, t, sp, m), stages, flags);
      KeyRef next = key_ref(p, t, sp, kStages - 1);
      for (int64_t n = 0; n < sp.ntiles; ++n) {
        // Committed: tiles 0 .. n + kStages - 2, one group each; tile n's copies are done at kStages - 2 pending.
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
        named_sync(kBarProducer, 128);  // tile n's bytes visible; every producer is past tile n - 1's dequantisation
        issue_tile<kStages>(p, sp, n + kStages - 1, next, stages, flags);  // into tile n - 1's stage
        next = key_ref(p, t, sp, n + kStages);                             // in flight during the dequantisation
        const int64_t kt = kt0 + n;
        const int slot = int(kt % kKeyTiles);
        if (kt >= kKeyTiles) mbar_wait(empty0 + 8 * slot, uint32_t(((kt / kKeyTiles) - 1) & 1));
        const uint8_t* fl = flags + (n % kStages) * kKeys;
        dequant_tile(stages + (n % kStages) * kStageBytes, fl, kb + slot * (kTileBytes / 2));
        if (threadIdx.x < 32) {
          const uint32_t bits = __ballot_sync(dev::kFull, fl[threadIdx.x] != 0);
          if (threadIdx.x == 0) mask[slot] = bits;
        }
        wg::fence_proxy_async();  // the tile's generic-proxy writes, before the consumers' wgmma read it
        mbar_arrive(full0 + 8 * slot);
      }
      kt0 += sp.ntiles;
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int ct = threadIdx.x - 128, c = ct >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hr = 16 * (warp & 3), d0 = kHalf * c;
  const uint32_t qa = smem_u32(qs), ka = smem_u32(kb);
  int64_t kt0 = 0;  // key tiles consumed for earlier items
  for (int64_t item = first; item < nitems; item += step) {
    const int64_t t = item % p.T, h0 = (item / p.T) % groups * kFp8Heads, split = item / p.T / groups;
    const Split sp = split_of(p, t, split);
    // The previous item's wgmma (the last that read Q) completed before its epilogue: Q's half may be rewritten.
    load_q_half<kQBf16>(q, t, h0, p.heads, c, ct & 127, qs);
    wg::fence_proxy_async();
    named_sync(kBarQ0 + c, 128);  // this warpgroup's Q half written (it reads no other dims)

    float acc[32][4];
#pragma unroll
    for (int nt = 0; nt < 32; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
    wg::fence_regs(acc);  // zeroed before the first wgmma is issued (ptxas serialises writes inside a wgmma stage)
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float s[4][4];
    if (sp.ntiles > 0) {
      mbar_wait(full0 + 8 * int(kt0 % kKeyTiles), uint32_t((kt0 / kKeyTiles) & 1));
      qk_issue(qa, ka + uint32_t(kt0 % kKeyTiles) * uint32_t(kTileBytes), d0, s);
    }
    for (int64_t n = 0; n < sp.ntiles; ++n) {
      const int64_t kt = kt0 + n;
      const int slot = int(kt % kKeyTiles);
      // Tile n - 1's P V was committed before tile n's Q K^T: its key tile goes back to the producer first.
      wg::wgmma_wait1();
      if (n > 0) mbar_arrive(empty0 + 8 * int((kt - 1) % kKeyTiles));
      wg::wgmma_wait0();
      wg::fence_regs(s);
      wg::fence_regs(acc);
      const uint32_t valid = mask[slot];
      // sc: this tile's scores. s stays the Q K^T accumulator only (no other instruction writes it, so ptxas keeps
      // the next tile's Q K^T asynchronous beside this tile's P V).
      float sc[4][4];
      // Exchange of the partial scores: the other consumer's 256 dims of the same heads.
      const int xb = C::kXBufs == 2 ? int(kt & 1) : 0;
      float* mine = sx + (xb * 2 + c) * 2048 + (warp & 3) * 512;
      const float* other = sx + (xb * 2 + (c ^ 1)) * 2048 + (warp & 3) * 512;
#pragma unroll
      for (int i = 0; i < 16; ++i) mine[i * 32 + lane] = s[i >> 2][i & 3];
      named_sync(kBarExchange, 256);
#pragma unroll
      for (int i = 0; i < 16; ++i) sc[i >> 2][i & 3] = s[i >> 2][i & 3] + other[i * 32 + lane];
      if constexpr (C::kXBufs == 1) named_sync(kBarExchange, 256);  // both read before the buffer is written again
      float alpha[2] = {1.0f, 1.0f};
      attn_mma::softmax_tile(sc, valid, p.scale, m, l, alpha);
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        acc[nt][0] *= alpha[0];
        acc[nt][1] *= alpha[0];
        acc[nt][2] *= alpha[1];
        acc[nt][3] *= alpha[1];
      }
      wg::pv_issue(sc, ka + uint32_t(slot) * uint32_t(kTileBytes), d0, acc);  // in flight ...
      if (n + 1 < sp.ntiles) {  // ... while tile n + 1's Q K^T is issued
        const int next = int((kt + 1) % kKeyTiles);
        mbar_wait(full0 + 8 * next, uint32_t(((kt + 1) / kKeyTiles) & 1));
        qk_issue(qa, ka + uint32_t(next) * uint32_t(kTileBytes), d0, s);
      }
    }
    if (sp.ntiles > 0) {
      wg::pv_wait(acc);
      mbar_arrive(empty0 + 8 * int((kt0 + sp.ntiles - 1) % kKeyTiles));
    }
    kt0 += sp.ntiles;
    const int64_t pos = p.rope_dim > 0 ? int64_t(p.pos[t]) : 0;
    attn_mma::write_rows(acc, m, l, h0 + hr, d0, t, split, p.heads, p.num_splits, kD, kPart, p.num_splits == 1,
                         p.sinks, o, ws,
                         [&](float& e0, float& e1, int d) { attn_fp8::out_rope(e0, e1, d, p, pos); });
  }
}
}  // namespace

namespace {
template <bool kQBf16, class C, bool kPersistent>
void launch_ws_kernel(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  const int64_t groups = (p.heads + kFp8Heads - 1) / kFp8Heads;
  dim3 grid(unsigned(p.T), unsigned(groups), unsigned(p.num_splits));
  if (kPersistent) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int64_t nitems = p.T * groups * p.num_splits;
    grid = dim3(unsigned(std::min<int64_t>(nitems, std::max(sms, 1))));
  }
  auto* kernel = sparse_attention_fp8_ws_kernel<kQBf16, C, kPersistent>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kBytes));
  kernel<<<grid, kThreads, C::kBytes, s>>>(p, q, o, workspace);
}

template <class C, bool kPersistent = false>
void launch_ws(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  if (p.q_bf16) launch_ws_kernel<true, C, kPersistent>(p, q, o, workspace, s);
  else launch_ws_kernel<false, C, kPersistent>(p, q, o, workspace, s);
}
}  // namespace

void launch_sparse_attention_fp8_ws(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                    void* stream) {
  launch_ws<WsKernel>(p, q, o, workspace, static_cast<cudaStream_t>(stream));
}

void launch_sparse_attention_fp8_ws_variant(const SparseAttentionFp8Params& p, const void* q, float* o,
                                            float* workspace, int variant, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (variant == kFp8WsDeepKeys) launch_ws<WsDeep>(p, q, o, workspace, s);
  else if (variant == kFp8WsDeepStages) launch_ws<WsWide>(p, q, o, workspace, s);
  else launch_ws<WsKernel, true>(p, q, o, workspace, s);
  if (p.num_splits > 1) launch_sparse_attention_fp8_combine(p, workspace, o, stream);
}

}  // namespace dsinfer::ops::cuda::detail
