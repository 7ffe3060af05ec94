// Sparse attention PREFILL over the FP8 state (session 19, issue 30). At prefill the warp-specialised FP8 kernel
// (sparse_attention_fp8_ws.cu) dequantised every key row once per (token, tile): a window row is read by 128 tokens,
// a compressed entry by hundreds, so the producer's conversion (~4 us a tile) bounded the step. Here:
// 1. staging (prefill_claim_kernel, prefill_dequant_kernel): every cache row the call's lists name gets one index
//    in a bf16 buffer (atomic claims; the map of each list: cache row -> staged row + 1) and is dequantised there
//    once, by attn_fp8::dequant16 (the kernels' conversion: the same bf16 values);
// 2. prefill_attention_kernel: the warp-specialised kernel's work items (token, 64-head group, split), tiles,
//    products, exchange, softmax and epilogue, in one block an SM walking the items (an item's epilogue stores, the
//    next item's q load and its first gathers overlap; session 19 measured the fixed cost of one block an item at
//    ~20 us, half the prefill), with a producer warpgroup that only gathers: thread i copies 16 of the 64 16-byte
//    chunks of key i / 4's staged row by cp.async straight into the bf16 key tile's core matrices, 4 key tiles in a
//    ring (no FP8 stages: 3 tiles in flight while the consumers work on one). A named row without a staged copy
//    (the staging's capacity passed) is dequantised by the producer from the cache, as the FP8 kernels do. The
//    epilogue's inverse RoPE reads the item's angles from a table the consumers fill once an item
//    (sparse_attention_rope_table.cuh; session 21: one double sincos an output pair had cost ~1.0-1.3 ms of a
//    4,096-token step).
// The consumers see the same bf16 tiles in the same order and run the same instructions: the output is bitwise the
// warp-specialised kernel's (the GPU test asserts it against both FP8 kernels and the CPU reference).
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16, q_chunk, kPart
#include "ops/sparse_attention/sparse_attention_launch.h"        // attn_split_range
#include "ops/sparse_attention/sparse_attention_mma.cuh"         // softmax_tile, rescale_rows, write_rows
#include "ops/sparse_attention/sparse_attention_prefill_launch.h"
#include "ops/sparse_attention/sparse_attention_rope_table.cuh"  // the item's inverse-RoPE angles, once
#include "ops/sparse_attention/sparse_attention_wgmma.cuh"  // the wgmma products and the core-matrix layout

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
namespace wg = attn_wgmma;
using attn_fp8::kChunksPerKey;
using attn_fp8::kD;
using attn_fp8::kData;
using attn_fp8::kPart;
using attn_mma::smem_u32;
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::named_sync;

// ------------------------------------------------------------------------------------------------ staging
// One thread a list entry (token t, entry j) of list blockIdx.y: the first to see a named row claims it.
__global__ void prefill_claim_kernel(SparseAttentionFp8Params p, PrefillStaging s) {
  const int li = int(blockIdx.y);
  const Fp8KeySource& src = li == 0 ? p.keys[0] : (li == 1 ? p.keys[1] : p.keys[2]);
  if (!src.idx) return;
  const int64_t n = p.T * src.stride;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / src.stride, j = e - t * src.stride;
    if (j >= attn_fp8::list_len(src, t)) continue;
    const int64_t r = src.idx[e];
    if (r < 0 || r >= src.rows) continue;
    int32_t* m = (li == 0 ? s.map[0] : (li == 1 ? s.map[1] : s.map[2])) + r;
    if (*reinterpret_cast<volatile int32_t*>(m) != 0 || atomicCAS(m, 0, -1) != 0) continue;
    const int32_t slot = atomicAdd(s.count, 1);
    if (slot >= s.cap) continue;  // stays -1: the attention kernel dequantises it from the cache
    s.inv[2 * slot] = li;
    s.inv[2 * slot + 1] = int32_t(r);
    *m = slot + 1;
  }
}

// Thread (row, chunk): chunk c < 28 of a claimed row's codes -> 16 bf16 at dims 16 c (dequant16), chunk 28 .. 35:
// 8 RoPE bf16 at dims 448 + 8 (c - 28), copied.
__global__ void prefill_dequant_kernel(SparseAttentionFp8Params p, PrefillStaging s) {
  const int64_t claimed = *s.count;
  const int64_t n = (claimed < s.cap ? claimed : s.cap) * kChunksPerKey;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t slot = e / kChunksPerKey;
    const int ch = int(e - slot * kChunksPerKey);
    const int li = s.inv[2 * slot];
    const Fp8KeySource& src = li == 0 ? p.keys[0] : (li == 1 ? p.keys[1] : p.keys[2]);
    const int64_t r = s.inv[2 * slot + 1];
    const uint8_t* data = src.cache + kv_data_offset(src.pages, r);
    const uint4 v = *reinterpret_cast<const uint4*>(data + 16 * ch);
    __nv_bfloat16* row = reinterpret_cast<__nv_bfloat16*>(s.rows) + slot * kD;
    if (ch < int(kKvNope) / 16) {
      attn_fp8::dequant16(v, src.cache[kv_scale_offset(src.pages, r) + ch / 4], row + 16 * ch, row + 16 * ch + 8);
    } else {
      *reinterpret_cast<uint4*>(row + int(kKvNope) + 8 * (ch - int(kKvNope) / 16)) = v;
    }
  }
}

// ------------------------------------------------------------------------------------------------ attention
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kKeys = kFp8Keys;
constexpr int kHalf = kD / 2;
constexpr int kKeyTiles = 4;  // bf16 key tiles in the ring
constexpr int kAhead = 2;     // tiles whose copies are in flight beyond the one being completed
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");
static_assert(kFp8Heads == 64 && kKeys == 32, "the wgmma shapes assume this tile shape");
// The producer reuses a tile once the consumers released it (at the start of their next tile): kAhead + 2 <= tiles.
static_assert(kAhead + 2 <= kKeyTiles, "ring depth");

constexpr size_t kTileBytes = size_t(kKeys) * kD * 2;
constexpr size_t kOffQ = 0;                                           // bf16 64 x 512, core matrices
constexpr size_t kOffK = kOffQ + size_t(kFp8Heads) * kD * 2;         // bf16 [kKeyTiles] 32 x 512
constexpr size_t kOffX = kOffK + kKeyTiles * kTileBytes;              // f32 [2 buffers][2 consumers][4 warps][512]
constexpr size_t kOffFlag = kOffX + size_t(2 * 2 * 4 * 512) * 4;      // u8 [kKeyTiles][32]: key present
constexpr size_t kOffBar = kOffFlag + size_t(kKeyTiles) * kKeys;      // u64 full[kKeyTiles], empty[kKeyTiles]
constexpr size_t kOffRope = kOffBar + 2 * kKeyTiles * 8;         // float2 [kMaxPairs]: the item's (cos, sin)
constexpr size_t kBytes = kOffRope + size_t(attn_rope::kMaxPairs) * 8;
static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kOffBar % 8 == 0 && kOffRope % 8 == 0 && kOffX % 16 == 0, "alignment");

enum NamedBarrier : int { kBarExchange = 2, kBarQ0 = 3 };  // kBarQ0 + c: consumer c's Q half

// The block's split of token t's keys, as the FP8 kernels cut it.
struct Split {  // 32-bit: a token's keys are a few thousand (registers are scarce beside the accumulators)
  int n0 = 0, n01 = 0, kbeg = 0, nk = 0, ntiles = 0;
};
__device__ __forceinline__ Split split_of(const SparseAttentionFp8Params& p, int64_t t, int64_t split) {
  Split sp;
  sp.n0 = int(attn_fp8::list_len(p.keys[0], t));
  sp.n01 = sp.n0 + int(attn_fp8::list_len(p.keys[1], t));
  const int64_t nkeys = sp.n01 + attn_fp8::list_len(p.keys[2], t);
  int64_t kbeg = 0, kend = 0;
  attn_split_range(nkeys, split, p.num_splits, 0, kKeys, kbeg, kend);
  sp.kbeg = int(kbeg);
  sp.nk = kend > kbeg ? int(kend - kbeg) : 0;
  sp.ntiles = (sp.nk + kKeys - 1) / kKeys;
  return sp;
}

// Producer thread i: key i / 4 of tile m into key tile `tile` (chunks of 8 dims c = i % 4, i % 4 + 4, ..): its staged
// row by cp.async (this thread's part of the tile's commit group), or zeros for a missing key, or the cache row
// dequantised here when the row has no staged copy.
__device__ __forceinline__ void gather_key(const SparseAttentionFp8Params& p, const PrefillStaging& s, int64_t t,
                                           const Split& sp, int m, __nv_bfloat16* kt, uint8_t* flags) {
  const int i = threadIdx.x, kr = i >> 2, kq = i & 3;
  const int k = m * kKeys + kr;
  int src = 0;
  const int64_t r = k < sp.nk ? attn_fp8::key_cache_row(p, t, sp.n0, sp.n01, sp.kbeg + k, src) : -1;
  if (kq == 0) flags[kr] = r >= 0 ? 1 : 0;
  if (r < 0) {
#pragma unroll
    for (int c = kq; c < kD / 8; c += 4) *reinterpret_cast<uint4*>(kt + wg::k_off(kr, 8 * c)) = make_uint4(0, 0, 0, 0);
    return;
  }
  // (selects, not an index: a runtime index into the kernel's parameters would copy them to local memory)
  const int32_t staged = (src == 0 ? s.map[0] : (src == 1 ? s.map[1] : s.map[2]))[r];
  if (staged > 0) {
    const __nv_bfloat16* row = reinterpret_cast<const __nv_bfloat16*>(s.rows) + int64_t(staged - 1) * kD;
#pragma unroll
    for (int c = kq; c < kD / 8; c += 4)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(kt + wg::k_off(kr, 8 * c))),
                   "l"(row + 8 * c)
                   : "memory");
    return;
  }
  const Fp8KeySource& ks = src == 0 ? p.keys[0] : (src == 1 ? p.keys[1] : p.keys[2]);
  const uint8_t* data = ks.cache + kv_data_offset(ks.pages, r);
  for (int ch = kq; ch < kChunksPerKey; ch += 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(data + 16 * ch);
    if (ch < int(kKvNope) / 16) {
      attn_fp8::dequant16(v, ks.cache[kv_scale_offset(ks.pages, r) + ch / 4], kt + wg::k_off(kr, 16 * ch),
                          kt + wg::k_off(kr, 16 * ch + 8));
    } else {
      *reinterpret_cast<uint4*>(kt + wg::k_off(kr, int(kKvNope) + 8 * (ch - int(kKvNope) / 16))) = v;
    }
  }
}

// A block's work items: i = blockIdx.x, + gridDim.x, .. (one block an SM); item i is token i % T, then the head
// group, then the split (tokens fastest: the blocks at work at one time share their keys).
struct Item {  // 32-bit: T x groups x splits < 2^31 (the launcher's grid)
  int t = 0, h0 = 0, split = 0;
};
__device__ __forceinline__ Item item_of(int i, int T, int groups) {
  Item it;
  it.t = i % T;
  const int r = i / T;
  it.h0 = (r % groups) * kFp8Heads;
  it.split = r / groups;
  return it;
}

// Item i's q rows into L2 (so that its q load does not wait on HBM); nothing past the last item.
template <bool kBf16>
__device__ __forceinline__ void prefetch_q(const void* q, int i, int total, int T, int H) {
  if (i >= total) return;
  const Item it = item_of(i, T, (H + kFp8Heads - 1) / kFp8Heads);
  const int64_t heads = H - it.h0 < kFp8Heads ? H - it.h0 : kFp8Heads;
  const int64_t bytes = heads * kD * (kBf16 ? 2 : 4);
  const char* base = static_cast<const char*>(q) + (int64_t(it.t) * H + it.h0) * kD * (kBf16 ? 2 : 4);
  for (int64_t off = int64_t(threadIdx.x) * 128; off < bytes; off += 128 * 128)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(base + off));
}

// Warpgroup 0, over the block's items in order: each tile (counted across items: g) into key tile g % kKeyTiles once
// the consumers released that key tile's previous use; tile g's `full` barrier once this thread's copies of it have
// landed (kAhead later tiles in flight meanwhile). Also the block's next item's q into L2 at the start of each item.
template <bool kGather, bool kQBf16>
__device__ __forceinline__ void produce(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                        int first, int stride, int total, __nv_bfloat16* kb, uint8_t* flags,
                                        uint32_t full0, uint32_t empty0) {
  const int groups = int((p.heads + kFp8Heads - 1) / kFp8Heads);
  int issued = 0, completed = 0;
  auto complete = [&] {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kAhead) : "memory");
    wg::fence_proxy_async();  // the tile's writes (copies and stores), before the consumers' wgmma read them
    mbar_arrive(full0 + 8 * int(completed % kKeyTiles));
    ++completed;
  };
  for (int i = first; i < total; i += stride) {
    prefetch_q<kQBf16>(q, i + stride, total, int(p.T), int(p.heads));
    const Item it = item_of(i, int(p.T), groups);
    const Split sp = split_of(p, it.t, it.split);
    for (int n = 0; n < sp.ntiles; ++n) {
      const int tile = int(issued % kKeyTiles);
      if (issued >= kKeyTiles) mbar_wait(empty0 + 8 * tile, uint32_t(((issued / kKeyTiles) - 1) & 1));
      if (kGather) gather_key(p, s, it.t, sp, n, kb + tile * (kTileBytes / 2), flags + tile * kKeys);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
      ++issued;
      if (issued - completed > kAhead) complete();
    }
  }
  while (completed < issued) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");  // an empty group: the tile kAhead back is then done
    complete();
  }
}

// Consumer c: q rows h0 .. h0 + 63, dims 256 c .., of token t -> Q's core matrices (zero rows for heads >= H). 8
// chunks' loads in flight a thread (the accumulators are not live yet: the registers are free), so the block's
// exposed q latency is 2 round trips, not 4.
template <bool kBf16>
__device__ __forceinline__ void load_q(const void* q, int64_t t, int64_t h0, int64_t H, int c, int ct,
                                       __nv_bfloat16* qs) {
#pragma unroll 8
  for (int i = ct; i < kFp8Heads * kHalf / 8; i += 128) {
    const int r = (i & 7) + 8 * ((i >> 5) & 7);
    const int c8 = ((i >> 3) & 3) + 4 * (i >> 8) + (kHalf / 8) * c;
    *reinterpret_cast<uint4*>(qs + wg::q_off(r, 8 * c8)) = attn_fp8::q_chunk<kBf16>(q, t, h0 + r, H, c8);
  }
}

// kProbe: 0 the kernel; else an OR of the kPrefillProbe* bits (sparse_attention_prefill_launch.h), phases left out
// for the bench's timing (the output is then wrong by design). One block an SM walking the items: the next item's q
// load and first tiles run behind this item's epilogue (session 19: one block an item measured 19 % slower).
template <bool kQBf16, int kProbe>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_attention_kernel(SparseAttentionFp8Params p, PrefillStaging st, const void* q, float* o, float* ws) {
  constexpr bool kQk = !(kProbe & kPrefillProbeNoQk), kPv = !(kProbe & kPrefillProbeNoPv);
  constexpr bool kSoftmax = !(kProbe & kPrefillProbeNoSoftmax), kLoadQ = !(kProbe & kPrefillProbeNoQ);
  constexpr bool kStore = !(kProbe & kPrefillProbeNoStore), kGather = !(kProbe & kPrefillProbeNoGather);
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
  float* sx = reinterpret_cast<float*>(smem + kOffX);
  uint8_t* flags = smem + kOffFlag;
  float2* rope = reinterpret_cast<float2*>(smem + kOffRope);
  const uint32_t full0 = smem_u32(smem + kOffBar), empty0 = full0 + 8 * kKeyTiles;
  const int T = int(p.T), groups = int((p.heads + kFp8Heads - 1) / kFp8Heads);
  const int total = T * groups * int(p.num_splits);
  const int first = int(blockIdx.x), stride = int(gridDim.x);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kKeyTiles; ++i) {
      mbar_init(full0 + 8 * i, 128);   // every producer thread, once its part of the tile is written
      mbar_init(empty0 + 8 * i, 256);  // every consumer thread, after its products read the tile
    }
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    produce<kGather, kQBf16>(p, st, q, first, stride, total, kb, flags, full0, empty0);
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int ct = threadIdx.x - 128, c = ct >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hr = 16 * (warp & 3), d0 = kHalf * c;
  const uint32_t qa = smem_u32(qs), ka = smem_u32(kb);
  int g = 0;  // tiles of the block's earlier items: key tile g % kKeyTiles, exchange buffer g % 2
  for (int i = first; i < total; i += stride) {
    const Item it = item_of(i, T, groups);
    const Split sp = split_of(p, it.t, it.split);
    if (i != first) named_sync(kBarQ0 + c, 128);  // the warpgroup's products of the last item are done with Q
    if (kLoadQ) load_q<kQBf16>(q, it.t, it.h0, p.heads, c, ct & 127, qs);
    // The item's inverse-RoPE angles of this warpgroup's dims, once (attn_rope: not one double sincos an output
    // pair); the barrier above ended the last item's reads, the one below orders these writes before the epilogue.
    if (kStore && p.num_splits == 1 && p.rope_dim > 0)
      attn_rope::fill(p, kD, int64_t(p.pos[it.t]), d0, d0 + kHalf, ct & 127, 128, rope);
    wg::fence_proxy_async();
    named_sync(kBarQ0 + c, 128);  // this warpgroup's Q half (and its angles) written: it reads no other dims

    float acc[32][4];
#pragma unroll
    for (int nt = 0; nt < 32; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
    wg::wgmma_fence_regs(acc);  // zeroed before the first wgmma is issued
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float s[4][4];
    if (!kQk)
#pragma unroll
      for (int k = 0; k < 16; ++k) s[k >> 2][k & 3] = 0.0f;
    if (sp.ntiles > 0) {
      mbar_wait(full0 + 8 * int(g % kKeyTiles), uint32_t((g / kKeyTiles) & 1));
      if (kQk) wg::qk_issue(qa, ka + uint32_t(g % kKeyTiles) * uint32_t(kTileBytes), d0, s);
    }
    for (int n = 0; n < sp.ntiles; ++n) {
      const int gn = g + n;
      const int tile = int(gn % kKeyTiles);
      wg::wgmma_wait<0>();  // tile n's Q K^T and tile n - 1's P V
      wg::wgmma_fence_regs(s);
      wg::wgmma_fence_regs(acc);
      if (n > 0) mbar_arrive(empty0 + 8 * int((gn - 1) % kKeyTiles));
      const uint32_t valid = __ballot_sync(dev::kFull, flags[tile * kKeys + lane] != 0);
      float sc[4][4];
      if (kSoftmax) {
        // Exchange of the partial scores: the other consumer's 256 dims of the same heads.
        float* mine = sx + ((gn & 1) * 2 + c) * 2048 + (warp & 3) * 512;
        const float* other = sx + ((gn & 1) * 2 + (c ^ 1)) * 2048 + (warp & 3) * 512;
#pragma unroll
        for (int k = 0; k < 16; ++k) mine[k * 32 + lane] = s[k >> 2][k & 3];
        named_sync(kBarExchange, 256);
#pragma unroll
        for (int k = 0; k < 16; ++k) sc[k >> 2][k & 3] = s[k >> 2][k & 3] + other[k * 32 + lane];
        float alpha[2] = {1.0f, 1.0f};
        attn_mma::softmax_tile(sc, valid, p.scale, m, l, alpha);
        attn_mma::rescale_rows(acc, alpha);
      } else {
#pragma unroll
        for (int k = 0; k < 16; ++k) sc[k >> 2][k & 3] = s[k >> 2][k & 3];
      }
      if (kPv) wg::pv_issue(sc, ka + uint32_t(tile) * uint32_t(kTileBytes), d0, acc);  // in flight while ...
      if (n + 1 < sp.ntiles) {  // ... tile n + 1's Q K^T runs
        const int next = int((gn + 1) % kKeyTiles);
        mbar_wait(full0 + 8 * next, uint32_t(((gn + 1) / kKeyTiles) & 1));
        if (kQk) wg::qk_issue(qa, ka + uint32_t(next) * uint32_t(kTileBytes), d0, s);
      }
    }
    if (sp.ntiles > 0) {
      wg::pv_wait(acc);
      mbar_arrive(empty0 + 8 * int((g + sp.ntiles - 1) % kKeyTiles));
    }
    g += sp.ntiles;
    if (!kStore) {  // one value a thread, so that the products are kept
      if (acc[0][0] == 12345.0f) o[threadIdx.x] = acc[1][1];
      continue;
    }
    attn_mma::write_rows(acc, m, l, it.h0 + hr, d0, it.t, it.split, p.heads, p.num_splits, kD, kPart,
                         p.num_splits == 1, p.sinks, o, ws,
                         [&](float& e0, float& e1, int d) { attn_rope::apply(e0, e1, d, kD, p, rope); });
  }
}
}  // namespace

void launch_prefill_stage(const SparseAttentionFp8Params& p, const PrefillStaging& s, int64_t map_ints,
                          void* stream) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  // count, then the maps: one contiguous region (sparse_attention_prefill_cuda.cpp's layout)
  cudaMemsetAsync(s.count, 0, size_t(map_ints) * 4, cs);
  int64_t entries = 0;
  for (const Fp8KeySource& k : p.keys) entries = k.idx && p.T * k.stride > entries ? p.T * k.stride : entries;
  const int64_t claim_blocks = (entries + 255) / 256;
  const dim3 grid(unsigned(claim_blocks < 4096 ? (claim_blocks > 0 ? claim_blocks : 1) : 4096),
                  unsigned(SparseAttentionFp8Params::kLists));
  prefill_claim_kernel<<<grid, 256, 0, cs>>>(p, s);
  const int64_t chunks = s.cap * kChunksPerKey;
  const int64_t blocks = (chunks + 255) / 256;
  prefill_dequant_kernel<<<unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096), 256, 0, cs>>>(p, s);
}

namespace {
template <bool kQBf16, int kProbe>
void launch_kernel(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q, float* o,
                   float* workspace, cudaStream_t cs) {
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t total = p.T * ((p.heads + kFp8Heads - 1) / kFp8Heads) * p.num_splits;
  const dim3 grid(unsigned(total < sms ? total : sms));
  cudaFuncSetAttribute(prefill_attention_kernel<kQBf16, kProbe>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(kBytes));
  prefill_attention_kernel<kQBf16, kProbe><<<grid, kThreads, kBytes, cs>>>(p, s, q, o, workspace);
}
}  // namespace

void launch_sparse_attention_prefill(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                     float* o, float* workspace, void* stream) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  if (p.q_bf16) launch_kernel<true, 0>(p, s, q, o, workspace, cs);
  else launch_kernel<false, 0>(p, s, q, o, workspace, cs);
}

bool launch_sparse_attention_prefill_probe(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q,
                                           float* o, float* workspace, int probe, void* stream) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  if (p.q_bf16) return false;
  switch (probe) {
    case kPrefillProbeNoQk: launch_kernel<false, kPrefillProbeNoQk>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoPv: launch_kernel<false, kPrefillProbeNoPv>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoSoftmax: launch_kernel<false, kPrefillProbeNoSoftmax>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoQ: launch_kernel<false, kPrefillProbeNoQ>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoStore: launch_kernel<false, kPrefillProbeNoStore>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoGather: launch_kernel<false, kPrefillProbeNoGather>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeNoMath: launch_kernel<false, kPrefillProbeNoMath>(p, s, q, o, workspace, cs); break;
    case kPrefillProbeSkeleton: launch_kernel<false, kPrefillProbeSkeleton>(p, s, q, o, workspace, cs); break;
    default: return false;
  }
  return true;
}

}  // namespace dsinfer::ops::cuda::detail
