// Sparse attention over the FP8 KV storage format, warp-specialised (session 17; the design of docs/decisions.md,
// 2026-12-03 session 16, after FlashMLA's SM90 sparse kernels). One block of three warpgroups per (token, 64-head
// group, key split), the grid, tiles, splits and partials of the lock-step kernel (sparse_attention_fp8.cu):
// - warpgroup 0, the producer (56 registers by setmaxnreg): gathers the keys of tile n + 2 (32 rows of 584 bytes,
//   cp.async, thread i: key i / 4) into a ring of 3 FP8 stages, dequantises tile n (e4m3 x UE8M0 -> bf16, exact, by
//   attn_fp8::dequant16_fast: byte permutes and one bf16 multiply, session 18) once for all 64 heads into one of 2
//   bf16 key tiles in wgmma core matrices (sparse_attention_wgmma.cuh's layout), and signals it on the tile's `full`
//   mbarrier;
// - warpgroups 1 and 2, the consumers (224 registers): warpgroup c owns output dims 256 c .. 256 c + 255 (64 x 256
//   fp32 accumulators, 128 a thread). A tile: Q K^T over its 256 dims (16 wgmma m64n32k16, Q and the key tile from
//   shared memory), partial scores exchanged with the other consumer through shared memory (double-buffered: one
//   named barrier of the 256 consumer threads a tile), the online softmax (p rounded to bf16), O += P V (2 wgmma
//   m64n256k16, P from registers, the key tile read MN-major), left in flight while the next tile's Q K^T is issued;
//   the key tile goes back to the producer on its `empty` mbarrier once both have completed.
// Every product, sum and rounding is the lock-step kernel's (its probe kProbeWgmma showed wgmma k16 steps round as
// mma.sync's): the output is bitwise the lock-step kernel's, which the GPU test asserts.
// Session 19, the pair (kWsPair, sparse_attention_fp8_launch.h): a cluster of two such blocks per (token, head group,
// split), after FlashMLA's two-CTA "crossover". Both compute the same scores (the same Q K^T halves and exchange);
// block r keeps output dims 256 r .. 256 r + 255 (consumer c: 128 of them, 64 accumulators a thread, P V as 2 wgmma
// m64n128k16), and its producer gathers and dequantises only half of every key row (block 0 chunks 0 .. 15, dims
// 0 .. 255; block 1 chunks 16 .. 35, dims 256 .. 511 with the RoPE channels), writing each value into its own key
// tile and the peer's (st.shared::cluster); a key tile is full when both producers have arrived (256 arrivals, half
// of them remote) and free when both blocks' consumer warps have released it (16 arrivals). The same products in the
// same order: the same bits. (Session 18's variants, the consumers dequantising and the conversion instructions, were
// slower at every shape and are gone: bench/NOTES.md.)
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16_fast, out_rope, kPart
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
constexpr int kStages = 3;    // FP8 stages: tile n being dequantised, n + 1 and n + 2 in flight
constexpr int kKeyTiles = 2;  // bf16 key tiles: the consumers on tile n, the producer writing tile n + 1
// setmaxnreg: the launch gives 168 a thread (65,536 / 384, rounded down to 8), 64,512 in all. One block: the
// consumers hold 128 accumulators. The pair: 64, so the producer takes more (its items unrolled).
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
constexpr int kPairProducerRegs = 152, kPairConsumerRegs = 176;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs == 384 * 168, "register file");
static_assert(128 * kPairProducerRegs + 256 * kPairConsumerRegs == 384 * 168, "register file");
static_assert(kFp8Heads == 64 && kKeys == 32, "the wgmma shapes assume this tile shape");
constexpr int kPairSplitChunk = kHalf / 16;  // the pair: block 0 chunks 0 .. 15, block 1 chunks 16 .. 35

// Byte offsets in dynamic shared memory.
constexpr int kStageBytes = kKeys * kData + kKeys * 8;                    // 32 data rows, then 32 x 8 scale bytes
constexpr size_t kOffQ = 0;                                               // bf16 64 x 512, core matrices
constexpr size_t kOffK = kOffQ + size_t(kFp8Heads) * kD * 2;             // bf16 [kKeyTiles] 32 x 512
constexpr size_t kTileBytes = size_t(kKeys) * kD * 2;
constexpr size_t kOffStage = kOffK + kKeyTiles * kTileBytes;              // [kStages] stages
constexpr size_t kOffX = kOffStage + size_t(kStages) * kStageBytes;       // f32 [2 buffers][2 consumers][4 warps][512]
constexpr size_t kOffFlag = kOffX + size_t(2 * 2 * 4 * 512) * 4;          // u8 [kStages][32]: key present
constexpr size_t kOffMask = kOffFlag + 128;                               // u32 [kKeyTiles]: present keys of a tile
// u64 full[kKeyTiles], empty[kKeyTiles], then kStages x 2 barriers that the one block initialises and never uses
// (init_barriers says why they are kept)
constexpr size_t kOffBar = kOffMask + 16;
constexpr size_t kBytes = kOffBar + (2 * kKeyTiles + 2 * kStages) * 8;
static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kOffBar % 8 == 0 && kOffStage % 16 == 0 && kOffX % 16 == 0, "alignment");

enum NamedBarrier : int { kBarProducer = 1, kBarExchange = 2, kBarQ0 = 3 };  // kBarQ0 + c: consumer c's Q half
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::named_sync;

// The pair's cluster pieces (sm_90; one PTX instruction each, "memory" clobbers as cuda/sm90_async.cuh's).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of both blocks: the mbarriers initialised before any remote arrival, and (at the end) no block leaves
// while its peer may still write into its shared memory or arrive on its barriers.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The shared::cluster address of shared address `addr` (this block's layout) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_addr(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_cluster(uint32_t addr, uint4 v) {
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
// mbar_wait, acquiring what the peer released at cluster scope (its writes into this block's key tiles).
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void fence_proxy_async_cluster() {
  asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
}
template <bool kPair>
__device__ __forceinline__ void wait_tile(uint32_t bar, uint32_t parity) {
  if constexpr (kPair) {
    mbar_wait_cluster(bar, parity);
  } else {
    mbar_wait(bar, parity);
  }
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

// Producer: chunks kCh0 .. kCh0 + kNch - 1 of tile m's rows into stage m % kStages (one commit group, empty past the
// split's end). Thread i copies key i / 4's chunks kCh0 + i % 4, + 4, .. (the 4 threads of a key read 64 contiguous
// bytes at a time) and, for i % 4 == 0, its 8 scale bytes and its presence flag.
template <int kCh0, int kNch>
__device__ __forceinline__ void issue_tile(const SparseAttentionFp8Params& p, int64_t t, const Split& sp, int64_t m,
                                           uint8_t* stages, uint8_t* flags) {
  const int i = threadIdx.x, kr = i >> 2, kq = i & 3;
  if (m < sp.ntiles) {
    uint8_t* dst = stages + (m % kStages) * kStageBytes;
    const int64_t k = m * kKeys + kr;
    const uint8_t* data = nullptr;
    const uint8_t* scale = nullptr;
    if (k < sp.nk) {
      int src = 0;
      const int64_t r = attn_fp8::key_cache_row(p, t, sp.n0, sp.n01, sp.kbeg + k, src);
      if (r >= 0) {
        data = p.keys[src].cache + kv_data_offset(p.keys[src].pages, r);
        scale = p.keys[src].cache + kv_scale_offset(p.keys[src].pages, r);
      }
    }
    if (kq == 0) flags[(m % kStages) * kKeys + kr] = data != nullptr ? 1 : 0;
    if (data != nullptr) {
#pragma unroll
      for (int j = kCh0 + kq; j < kCh0 + kNch; j += 4)
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

// 16 bytes at *own (this block's key tile) and, in the pair, at the peer's same place (peer: the shared::cluster
// address of the peer's tile, off: the element offset in it).
template <bool kPair>
__device__ __forceinline__ void put16(__nv_bfloat16* own, uint32_t peer, int off, uint4 v) {
  *reinterpret_cast<uint4*>(own) = v;
  if constexpr (kPair) st_cluster(peer + 2u * uint32_t(off), v);
}

// 128 threads (thread tid): chunks kCh0 .. kCh0 + kNch - 1 of every key of a stage -> the bf16 key tile (core
// matrices); zero rows for missing keys. Item c is key r = 8 ((c / 8) % 4) + c % 8, chunk kCh0 + ((c / 32) +
// (c % 8) / 2) % kNch of it: the 8 threads of a 16-byte access phase read 8 keys 576 bytes apart at 8 different bank
// groups and write 8 rows of one core matrix (as the lock-step kernel's kProbeWgmma mapping). One block takes all 36
// chunks; in the pair block 0 takes chunks 0 .. 15 and block 1 chunks 16 .. 35, each writing both blocks' tiles.
// kUnroll: the one block's producer (56 registers) keeps one item at a time; the pair's unrolls its 4 or 5 items.
template <int kCh0, int kNch, int kUnroll, bool kPair>
__device__ __forceinline__ void dequant_chunks(const uint8_t* __restrict__ stage, const uint8_t* __restrict__ flags,
                                               __nv_bfloat16* __restrict__ ks, uint32_t peer_ks, int tid) {
  static_assert(kKeys * kNch % 128 == 0, "whole rounds of 128 items");
#pragma unroll kUnroll
  for (int it = 0; it < kKeys * kNch / 128; ++it) {
    const int c = tid + 128 * it;
    const int i = c & 7, j = c >> 3;
    const int r = 8 * (j & 3) + i;
    const int ch = kCh0 + ((j >> 2) + (i >> 1)) % kNch;
    const bool nope = ch < int(kKvNope) / 16;
    // NoPE chunk ch: dims 16 ch .. + 15; RoPE chunk: 8 bf16 at dims kKvNope + 8 (ch - 28).
    const int d = nope ? 16 * ch : int(kKvNope) + 8 * (ch - int(kKvNope) / 16);
    const int olo = wg::k_off(r, d), ohi = wg::k_off(r, d + 8);
    __nv_bfloat16* lo = ks + olo;
    __nv_bfloat16* hi = ks + ohi;
    if (!flags[r]) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      put16<kPair>(lo, peer_ks, olo, z);
      if (nope) put16<kPair>(hi, peer_ks, ohi, z);
      continue;  // (unrolled: the next item)
    }
    const uint4 v = *reinterpret_cast<const uint4*>(stage + r * kData + 16 * ch);
    if (nope) {
      if constexpr (kPair) {
        uint32_t b[8];
        const uint8_t sb = stage[kKeys * kData + 8 * r + ch / 4];
        if (!attn_fp8::dequant16_fast_bits(v, sb, b)) attn_fp8::dequant16_bits(v, sb, b);
        put16<kPair>(lo, peer_ks, olo, make_uint4(b[0], b[1], b[2], b[3]));
        put16<kPair>(hi, peer_ks, ohi, make_uint4(b[4], b[5], b[6], b[7]));
      } else {
        attn_fp8::dequant16_fast(v, stage[kKeys * kData + 8 * r + ch / 4], lo, hi);
      }
    } else {
      put16<kPair>(lo, peer_ks, olo, v);  // bf16 RoPE channels
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
    const uint4 out = attn_fp8::q_chunk<kBf16>(q, t, h0 + r, H, c8);
    *reinterpret_cast<uint4*>(qs + wg::q_off(r, 8 * c8)) = out;
  }
}

// The pair's P V step: acc (64 x 128 fp32) += A (64 heads x 16 keys, bf16 fragments a) * B (16 keys x 128 dims at db,
// MN-major); attn_wgmma::wgmma_m64n256k16_rs on half the dims (each output element the same k16 step).
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&acc)[16][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(acc[0][0]), "+f"(acc[0][1]), "+f"(acc[0][2]), "+f"(acc[0][3]), "+f"(acc[1][0]), "+f"(acc[1][1]),
        "+f"(acc[1][2]), "+f"(acc[1][3]), "+f"(acc[2][0]), "+f"(acc[2][1]), "+f"(acc[2][2]), "+f"(acc[2][3]),
        "+f"(acc[3][0]), "+f"(acc[3][1]), "+f"(acc[3][2]), "+f"(acc[3][3]), "+f"(acc[4][0]), "+f"(acc[4][1]),
        "+f"(acc[4][2]), "+f"(acc[4][3]), "+f"(acc[5][0]), "+f"(acc[5][1]), "+f"(acc[5][2]), "+f"(acc[5][3]),
        "+f"(acc[6][0]), "+f"(acc[6][1]), "+f"(acc[6][2]), "+f"(acc[6][3]), "+f"(acc[7][0]), "+f"(acc[7][1]),
        "+f"(acc[7][2]), "+f"(acc[7][3]), "+f"(acc[8][0]), "+f"(acc[8][1]), "+f"(acc[8][2]), "+f"(acc[8][3]),
        "+f"(acc[9][0]), "+f"(acc[9][1]), "+f"(acc[9][2]), "+f"(acc[9][3]), "+f"(acc[10][0]), "+f"(acc[10][1]),
        "+f"(acc[10][2]), "+f"(acc[10][3]), "+f"(acc[11][0]), "+f"(acc[11][1]), "+f"(acc[11][2]), "+f"(acc[11][3]),
        "+f"(acc[12][0]), "+f"(acc[12][1]), "+f"(acc[12][2]), "+f"(acc[12][3]), "+f"(acc[13][0]), "+f"(acc[13][1]),
        "+f"(acc[13][2]), "+f"(acc[13][3]), "+f"(acc[14][0]), "+f"(acc[14][1]), "+f"(acc[14][2]), "+f"(acc[14][3]),
        "+f"(acc[15][0]), "+f"(acc[15][1]), "+f"(acc[15][2]), "+f"(acc[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// O += P V over the tile's 32 keys for the warpgroup's dims d0 .. (256 of them: attn_wgmma::pv_issue; 128 in the
// pair), issued and left in flight (acc untouched until the next wgmma_wait).
template <int N>
__device__ __forceinline__ void pv_issue(const float (&p)[4][4], uint32_t ks, int d0, float (&acc)[N][4]) {
  if constexpr (N == 32) {
    wg::pv_issue(p, ks, d0, acc);
  } else {
    static_assert(N == 16, "128 or 256 dims");
    uint32_t a[2][4];
    wg::p_fragments(p, a);
    wg::wgmma_fence_regs(acc);
    wg::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
      wgmma_m64n128k16_rs(acc, a[kk], wg::wgmma_desc(ks + uint32_t(d0) * 64u + uint32_t(kk) * 256u, 128u, 512u));
    wg::wgmma_commit();
  }
}

// Warpgroup 0: gathers every tile of the split (its chunks: all, or the pair's half of them) into the FP8 ring and
// dequantises it into the bf16 key tiles (the pair: both blocks'), signalling each on its mbarriers (the kernel's
// comment; barriers at full0, empty0 as laid out there; rank: the block in the pair).
template <bool kPair, int kCh0, int kNch>
__device__ __forceinline__ void produce(const SparseAttentionFp8Params& p, int64_t t, const Split& sp, uint8_t* stages,
                                        uint8_t* flags, uint32_t* mask, __nv_bfloat16* kb, uint32_t full0,
                                        uint32_t empty0, uint32_t rank) {
  const uint32_t peer_kb = kPair ? peer_addr(smem_u32(kb), rank ^ 1u) : 0u;
  const uint32_t peer_full0 = kPair ? peer_addr(full0, rank ^ 1u) : 0u;
  for (int64_t m = 0; m < kStages - 1; ++m) issue_tile<kCh0, kNch>(p, t, sp, m, stages, flags);
  for (int64_t n = 0; n < sp.ntiles; ++n) {
    // Committed: tiles 0 .. n + kStages - 2, one group each; tile n's copies are done at kStages - 2 pending.
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
    named_sync(kBarProducer, 128);  // tile n's bytes visible; every producer is past tile n - 1's dequantisation
    issue_tile<kCh0, kNch>(p, t, sp, n + kStages - 1, stages, flags);  // into tile n - 1's stage
    const int slot = int(n % kKeyTiles);
    if (n >= kKeyTiles) wait_tile<kPair>(empty0 + 8 * slot, uint32_t(((n / kKeyTiles) - 1) & 1));
    const uint8_t* fl = flags + (n % kStages) * kKeys;
    dequant_chunks<kCh0, kNch, kPair ? kKeys * kNch / 128 : 1, kPair>(
        stages + (n % kStages) * kStageBytes, fl, kb + slot * (kTileBytes / 2), peer_kb + uint32_t(slot * kTileBytes),
        threadIdx.x);
    if (threadIdx.x < 32) {
      const uint32_t bits = __ballot_sync(dev::kFull, fl[threadIdx.x] != 0);
      if (threadIdx.x == 0) mask[slot] = bits;
    }
    if constexpr (kPair) {
      fence_proxy_async_cluster();  // both tiles' generic-proxy writes, before either block's wgmma read them
      mbar_arrive(full0 + 8 * slot);
      mbar_arrive_cluster(peer_full0 + 8 * slot);
    } else {
      wg::fence_proxy_async();  // the tile's generic-proxy writes, before the consumers' wgmma read them
      mbar_arrive(full0 + 8 * slot);
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// The key tiles' barriers, seen by every thread of the block (the pair: of both blocks) before any arrival. full:
// every producer thread after its writes (the pair: both blocks' producers). empty: every consumer thread after its
// products read the tile (the pair: lane 0 of each consumer warp of both blocks).
template <bool kPair>
__device__ __forceinline__ void init_barriers(uint32_t full0, uint32_t empty0) {
  if (threadIdx.x == 0) {
    if constexpr (!kPair) {
      // Kept, never waited on: session 18's consumer-dequantising variant's per-stage full / empty barriers. Removing
      // them (session 19) moved the one block's code and cost ~4 % (A/B before removing: prefill 4,096 5.19 against
      // 5.00 ms, bench/NOTES.md, session 21 helper s21-sparsed). They come first: after the key tiles' inits they
      // changed the pair's code too.
      for (int i = 0; i < kStages; ++i) {
        mbar_init(empty0 + 8 * (kKeyTiles + i), 128);
        mbar_init(empty0 + 8 * (kKeyTiles + kStages + i), 256);
      }
    }
    for (int i = 0; i < kKeyTiles; ++i) {
      mbar_init(full0 + 8 * i, kPair ? 256 : 128);
      mbar_init(empty0 + 8 * i, kPair ? 16 : 256);
    }
    if (kPair) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (kPair) {
    cluster_sync();
  } else {
    __syncthreads();
  }
}

template <bool kQBf16, bool kPair>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_fp8_ws_kernel(SparseAttentionFp8Params p, const void* q, float* o, float* ws) {
  constexpr int kN = kPair ? 16 : 32;  // accumulator columns of 8 dims a thread: 128 or 256 dims a warpgroup
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
  uint8_t* stages = smem + kOffStage;
  float* sx = reinterpret_cast<float*>(smem + kOffX);
  uint8_t* flags = smem + kOffFlag;
  uint32_t* mask = reinterpret_cast<uint32_t*>(smem + kOffMask);
  const uint32_t full0 = smem_u32(smem + kOffBar), empty0 = full0 + 8 * kKeyTiles;
  const uint32_t rank = kPair ? cluster_rank() : 0u;
  const int64_t t = kPair ? int64_t(blockIdx.x >> 1) : int64_t(blockIdx.x);
  const int64_t h0 = int64_t(blockIdx.y) * kFp8Heads, split = blockIdx.z;
  const Split sp = split_of(p, t, split);
  init_barriers<kPair>(full0, empty0);

  if (threadIdx.x < 128) {  // ---- producer ----
    if constexpr (kPair) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kPairProducerRegs));
      if (rank == 0) {
        produce<true, 0, kPairSplitChunk>(p, t, sp, stages, flags, mask, kb, full0, empty0, rank);
      } else {
        produce<true, kPairSplitChunk, kChunksPerKey - kPairSplitChunk>(p, t, sp, stages, flags, mask, kb, full0,
                                                                         empty0, rank);
      }
      cluster_sync();
    } else {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
      produce<false, 0, kChunksPerKey>(p, t, sp, stages, flags, mask, kb, full0, empty0, rank);
    }
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kPair ? kPairConsumerRegs : kConsumerRegs));
  const int ct = threadIdx.x - 128, c = ct >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hr = 16 * (warp & 3), d0 = kHalf * c;
  const int dv = kPair ? kHalf * int(rank) + 8 * kN * c : d0;  // this warpgroup's output dims dv .. dv + 8 kN - 1
  const uint32_t peer_empty0 = kPair ? peer_addr(empty0, rank ^ 1u) : 0u;
  // Tile n - 1's key tile back to the producer(s): every consumer thread, or in the pair lane 0 of each warp on both
  // blocks' barriers (the wgmma wait before it is warp-wide).
  auto release = [&](int64_t n) {
    const int s = int(n % kKeyTiles);
    if constexpr (kPair) {
      if (lane == 0) {
        mbar_arrive(empty0 + 8 * s);
        mbar_arrive_cluster(peer_empty0 + 8 * s);
      }
    } else {
      mbar_arrive(empty0 + 8 * s);
    }
  };
  load_q_half<kQBf16>(q, t, h0, p.heads, c, ct & 127, qs);
  wg::fence_proxy_async();
  named_sync(kBarQ0 + c, 128);  // this warpgroup's Q half written: it reads no other dims

  float acc[kN][4];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  wg::wgmma_fence_regs(acc);  // zeroed before the first wgmma is issued (ptxas serialises writes inside a wgmma stage)
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float s[4][4];
  const uint32_t qa = smem_u32(qs), ka = smem_u32(kb);
  if (sp.ntiles > 0) {
    wait_tile<kPair>(full0, 0);
    if (kPair) wg::fence_proxy_async();
    wg::qk_issue(qa, ka, d0, s);
  }
  for (int64_t n = 0; n < sp.ntiles; ++n) {
    const int slot = int(n % kKeyTiles);
    wg::wgmma_wait<0>();  // tile n's Q K^T and tile n - 1's P V
    wg::wgmma_fence_regs(s);
    wg::wgmma_fence_regs(acc);
    if (n > 0) release(n - 1);
    const uint32_t valid = mask[slot];
    // sc: this tile's scores. s stays the Q K^T accumulator only (no other instruction writes it, so ptxas keeps the
    // next tile's Q K^T asynchronous beside this tile's P V).
    float sc[4][4];
    // Exchange of the partial scores: the other consumer's 256 dims of the same heads.
    float* mine = sx + ((n & 1) * 2 + c) * 2048 + (warp & 3) * 512;
    const float* other = sx + ((n & 1) * 2 + (c ^ 1)) * 2048 + (warp & 3) * 512;
#pragma unroll
    for (int i = 0; i < 16; ++i) mine[i * 32 + lane] = s[i >> 2][i & 3];
    // Also: every consumer thread has waited for tile n - 1's products, so its key tile may be written again.
    named_sync(kBarExchange, 256);
#pragma unroll
    for (int i = 0; i < 16; ++i) sc[i >> 2][i & 3] = s[i >> 2][i & 3] + other[i * 32 + lane];
    float alpha[2] = {1.0f, 1.0f};
    attn_mma::softmax_tile(sc, valid, p.scale, m, l, alpha);
    attn_mma::rescale_rows(acc, alpha);
    pv_issue(sc, ka + uint32_t(slot) * uint32_t(kTileBytes), dv, acc);  // in flight ...
    if (n + 1 < sp.ntiles) {  // ... while tile n + 1's Q K^T is issued once it is dequantised
      const int next = int((n + 1) % kKeyTiles);
      wait_tile<kPair>(full0 + 8 * next, uint32_t(((n + 1) / kKeyTiles) & 1));
      if (kPair) wg::fence_proxy_async();
      wg::qk_issue(qa, ka + uint32_t(next) * uint32_t(kTileBytes), d0, s);
    }
  }
  if (sp.ntiles > 0) {
    wg::wgmma_wait<0>();
    wg::wgmma_fence_regs(acc);
    release(sp.ntiles - 1);
  }
  const int64_t pos = p.rope_dim > 0 ? int64_t(p.pos[t]) : 0;
  attn_mma::write_rows(acc, m, l, h0 + hr, dv, t, split, p.heads, p.num_splits, kD, kPart, p.num_splits == 1,
                       p.sinks, o, ws, [&](float& e0, float& e1, int d) { attn_fp8::out_rope(e0, e1, d, p, pos); });
  if constexpr (kPair) cluster_sync();
}

template <bool kQBf16, bool kPair>
void launch_kernel(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  auto* kernel = sparse_attention_fp8_ws_kernel<kQBf16, kPair>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBytes));
  const dim3 grid(unsigned(p.T * (kPair ? 2 : 1)), unsigned((p.heads + kFp8Heads - 1) / kFp8Heads),
                  unsigned(p.num_splits));
  if constexpr (!kPair) {
    kernel<<<grid, kThreads, kBytes, s>>>(p, q, o, workspace);
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kBytes;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, kernel, p, q, o, workspace);
  }
}

template <bool kPair>
void launch_variant(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  if (p.q_bf16) {
    launch_kernel<true, kPair>(p, q, o, workspace, s);
  } else {
    launch_kernel<false, kPair>(p, q, o, workspace, s);
  }
}

// Every (code, scale byte) pair through dequant16, dequant16_fast (the one block's producer) and dequant16_fast_bits
// with its fallback (the pair's producer): block = scale byte, thread i = codes 16 i ..
__global__ void fp8_dequant_table_kernel(uint16_t* fast, uint16_t* fast_bits, uint16_t* ref) {
  const uint32_t b = 16u * threadIdx.x;
  uint32_t w[4];
  for (int i = 0; i < 4; ++i) w[i] = (b + 4 * i) | (b + 4 * i + 1) << 8 | (b + 4 * i + 2) << 16 | (b + 4 * i + 3) << 24;
  const uint4 codes = make_uint4(w[0], w[1], w[2], w[3]);
  const uint8_t sb = uint8_t(blockIdx.x);
  __align__(16) __nv_bfloat16 f[16], r[16];
  attn_fp8::dequant16_fast(codes, sb, f, f + 8);
  attn_fp8::dequant16(codes, sb, r, r + 8);
  uint32_t fb[8];
  if (!attn_fp8::dequant16_fast_bits(codes, sb, fb)) attn_fp8::dequant16_bits(codes, sb, fb);
  for (int i = 0; i < 16; ++i) {
    fast[blockIdx.x * 256 + b + i] = __bfloat16_as_ushort(f[i]);
    fast_bits[blockIdx.x * 256 + b + i] = uint16_t(fb[i / 2] >> (16 * (i % 2)));
    ref[blockIdx.x * 256 + b + i] = __bfloat16_as_ushort(r[i]);
  }
}
}  // namespace

void launch_sparse_attention_fp8_ws(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                    bool pair, void* stream) {
  if (pair) {
    launch_variant<true>(p, q, o, workspace, static_cast<cudaStream_t>(stream));
  } else {
    launch_variant<false>(p, q, o, workspace, static_cast<cudaStream_t>(stream));
  }
}

bool launch_sparse_attention_fp8_ws_variant(const SparseAttentionFp8Params& p, const void* q, float* o,
                                            float* workspace, int variant, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case kWsOneBlock: launch_variant<false>(p, q, o, workspace, s); break;
    case kWsPair: launch_variant<true>(p, q, o, workspace, s); break;
    default: return false;
  }
  if (p.num_splits > 1) launch_sparse_attention_fp8_combine(p, workspace, o, stream);
  return true;
}

void launch_fp8_dequant_table(uint16_t* fast, uint16_t* fast_bits, uint16_t* ref, void* stream) {
  fp8_dequant_table_kernel<<<256, 16, 0, static_cast<cudaStream_t>(stream)>>>(fast, fast_bits, ref);
}

}  // namespace dsinfer::ops::cuda::detail
