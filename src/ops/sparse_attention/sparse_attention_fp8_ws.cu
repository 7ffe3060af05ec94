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

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"
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
constexpr int kStages = 3;    // FP8 stages: tile n being dequantised, n + 1 and n + 2 in flight
constexpr int kKeyTiles = 2;  // bf16 key tiles: the consumers on tile n, the producer writing tile n + 1
constexpr int kProducerRegs = 56, kConsumerRegs = 224;  // 128 x 56 + 256 x 224 <= 64K
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");
static_assert(kFp8Heads == 64 && kKeys == 32, "the wgmma shapes assume this tile shape");

// Byte offsets in dynamic shared memory.
constexpr int kStageBytes = kKeys * kData + kKeys * 8;                    // 32 data rows, then 32 x 8 scale bytes
constexpr size_t kOffQ = 0;                                               // bf16 64 x 512, core matrices
constexpr size_t kOffK = kOffQ + size_t(kFp8Heads) * kD * 2;             // bf16 [kKeyTiles] 32 x 512
constexpr size_t kTileBytes = size_t(kKeys) * kD * 2;
constexpr size_t kOffStage = kOffK + kKeyTiles * kTileBytes;              // [kStages] stages
constexpr size_t kOffX = kOffStage + size_t(kStages) * kStageBytes;       // f32 [2 buffers][2 consumers][4 warps][512]
constexpr size_t kOffFlag = kOffX + size_t(2 * 2 * 4 * 512) * 4;          // u8 [kStages][32]: key present
constexpr size_t kOffMask = kOffFlag + 128;                               // u32 [kKeyTiles]: present keys of a tile
constexpr size_t kOffBar = kOffMask + 16;                                 // u64 full[kKeyTiles], empty[kKeyTiles]
constexpr size_t kBytes = kOffBar + 2 * kKeyTiles * 8;
static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kOffBar % 8 == 0 && kOffStage % 16 == 0 && kOffX % 16 == 0, "alignment");

enum NamedBarrier : int { kBarProducer = 1, kBarExchange = 2, kBarQ0 = 3 };  // kBarQ0 + c: consumer c's Q half
using ::dsinfer::cuda::sm90::mbar_arrive;
using ::dsinfer::cuda::sm90::mbar_init;
using ::dsinfer::cuda::sm90::mbar_wait;
using ::dsinfer::cuda::sm90::named_sync;

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

// Producer: tile m's rows into stage m % kStages (one commit group, empty past the split's end). Thread i copies key
// i / 4's chunks i % 4, i % 4 + 4, .. (the 4 threads of a key read 64 contiguous bytes at a time) and, for i % 4 == 0,
// its 8 scale bytes and its presence flag.
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
  for (int c = threadIdx.x; c < kKeys * kChunksPerKey; c += 128) {
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

template <bool kQBf16>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_fp8_ws_kernel(SparseAttentionFp8Params p, const void* q, float* o, float* ws) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
  uint8_t* stages = smem + kOffStage;
  float* sx = reinterpret_cast<float*>(smem + kOffX);
  uint8_t* flags = smem + kOffFlag;
  uint32_t* mask = reinterpret_cast<uint32_t*>(smem + kOffMask);
  const uint32_t full0 = smem_u32(smem + kOffBar), empty0 = full0 + 8 * kKeyTiles;
  const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kFp8Heads, split = blockIdx.z;
  const Split sp = split_of(p, t, split);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kKeyTiles; ++i) {
      mbar_init(full0 + 8 * i, 128);   // every producer thread, after its writes
      mbar_init(empty0 + 8 * i, 256);  // every consumer thread, after its products read the tile
    }
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    for (int64_t m = 0; m < kStages - 1; ++m) issue_tile(p, t, sp, m, stages, flags);
    for (int64_t n = 0; n < sp.ntiles; ++n) {
      // Committed: tiles 0 .. n + kStages - 2, one group each; tile n's copies are done at kStages - 2 pending.
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
      named_sync(kBarProducer, 128);  // tile n's bytes visible; every producer is past tile n - 1's dequantisation
      issue_tile(p, t, sp, n + kStages - 1, stages, flags);  // into tile n - 1's stage
      const int slot = int(n % kKeyTiles);
      if (n >= kKeyTiles) mbar_wait(empty0 + 8 * slot, uint32_t(((n / kKeyTiles) - 1) & 1));
      const uint8_t* fl = flags + (n % kStages) * kKeys;
      dequant_tile(stages + (n % kStages) * kStageBytes, fl, kb + slot * (kTileBytes / 2));
      if (threadIdx.x < 32) {
        const uint32_t bits = __ballot_sync(dev::kFull, fl[threadIdx.x] != 0);
        if (threadIdx.x == 0) mask[slot] = bits;
      }
      wg::fence_proxy_async();  // the tile's generic-proxy writes, before the consumers' wgmma read it
      mbar_arrive(full0 + 8 * slot);
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    return;
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int ct = threadIdx.x - 128, c = ct >> 7, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hr = 16 * (warp & 3), d0 = kHalf * c;
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
  const uint32_t qa = smem_u32(qs), ka = smem_u32(kb);
  if (sp.ntiles > 0) {
    mbar_wait(full0, 0);
    qk_issue(qa, ka, d0, s);
  }
  for (int64_t n = 0; n < sp.ntiles; ++n) {
    const int slot = int(n % kKeyTiles);
    wg::wgmma_wait<0>();  // tile n's Q K^T and tile n - 1's P V
    wg::fence_regs(s);
    wg::fence_regs(acc);
    if (n > 0) mbar_arrive(empty0 + 8 * int((n - 1) % kKeyTiles));
    const uint32_t valid = mask[slot];
    // sc: this tile's scores. s stays the Q K^T accumulator only (no other instruction writes it, so ptxas keeps the
    // next tile's Q K^T asynchronous beside this tile's P V).
    float sc[4][4];
    // Exchange of the partial scores: the other consumer's 256 dims of the same heads.
    float* mine = sx + ((n & 1) * 2 + c) * 2048 + (warp & 3) * 512;
    const float* other = sx + ((n & 1) * 2 + (c ^ 1)) * 2048 + (warp & 3) * 512;
#pragma unroll
    for (int i = 0; i < 16; ++i) mine[i * 32 + lane] = s[i >> 2][i & 3];
    named_sync(kBarExchange, 256);
#pragma unroll
    for (int i = 0; i < 16; ++i) sc[i >> 2][i & 3] = s[i >> 2][i & 3] + other[i * 32 + lane];
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
      const int next = int((n + 1) % kKeyTiles);
      mbar_wait(full0 + 8 * next, uint32_t(((n + 1) / kKeyTiles) & 1));
      qk_issue(qa, ka + uint32_t(next) * uint32_t(kTileBytes), d0, s);
    }
  }
  if (sp.ntiles > 0) {
    wg::pv_wait(acc);
    mbar_arrive(empty0 + 8 * int((sp.ntiles - 1) % kKeyTiles));
  }
  const int64_t pos = p.rope_dim > 0 ? int64_t(p.pos[t]) : 0;
  attn_mma::write_rows(acc, m, l, h0 + hr, d0, t, split, p.heads, p.num_splits, kD, kPart, p.num_splits == 1,
                       p.sinks, o, ws, [&](float& e0, float& e1, int d) { attn_fp8::out_rope(e0, e1, d, p, pos); });
}
}  // namespace

void launch_sparse_attention_fp8_ws(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                    void* stream) {
  const dim3 grid(unsigned(p.T), unsigned((p.heads + kFp8Heads - 1) / kFp8Heads), unsigned(p.num_splits));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.q_bf16) {
    cudaFuncSetAttribute(sparse_attention_fp8_ws_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(kBytes));
    sparse_attention_fp8_ws_kernel<true><<<grid, kThreads, kBytes, s>>>(p, q, o, workspace);
  } else {
    cudaFuncSetAttribute(sparse_attention_fp8_ws_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(kBytes));
    sparse_attention_fp8_ws_kernel<false><<<grid, kThreads, kBytes, s>>>(p, q, o, workspace);
  }
}

}  // namespace dsinfer::ops::cuda::detail
