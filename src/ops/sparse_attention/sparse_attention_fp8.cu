// Sparse attention decode over the FP8 KV storage format (see sparse_attention_fp8_cuda.h). One block per (token,
// 64-head group, key split), 8 warps; the math is sparse_attention_tc.cu's (warp w: heads 16 * (w % 4) .., dims
// 256 * (w / 4) ..; S = Q K^T halves added through shared memory; online softmax with p rounded to bf16; O += P V
// with P from the score registers and V by ldmatrix.trans), the state path is new: a key is its 576 data bytes and
// 8 scale bytes (ops/kv_format), 3.5x fewer than an fp32 row, so the cp.async ring holds 8 half tiles of 16 keys
// (75 KB) and two bf16 key tiles alternate: tile n + 1 is dequantised while tile n's softmax and P V run (two
// barriers a tile; the session-12 loop with three stays as a bench probe, Smem). A tile is dequantised once for all
// 64 heads into the bf16 key tile by 16-code chunks: e4m3x2 -> f16x2 (one cvt), times the tile's UE8M0 scale in
// fp32, -> bf16x2; every product is a bf16 value, so the tile is exact. The mma building blocks (and their fragment
// layouts) are sparse_attention_mma.cuh's, shared with the tc kernel. The probe kProbeWgmma (session 16) runs the
// same loop with the products as wgmma from shared memory (sparse_attention_wgmma.cuh: tiles in 8 x 8 core
// matrices, P V left in flight while the next tile is dequantised): the same bits, measured no faster (bench/NOTES.md,
// session 16), so it is not the kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/ops_device.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16, out_rope, kPart
#include "ops/sparse_attention/sparse_attention_fp8_launch.h"
#include "ops/sparse_attention/sparse_attention_launch.h"  // attn_split_range
#include "ops/sparse_attention/sparse_attention_mma.cuh"     // qk_half, softmax_tile, pv_half, the mma wrappers
#include "ops/sparse_attention/sparse_attention_wgmma.cuh"   // the kProbeWgmma products and tile layout

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
using namespace attn_mma;  // NOLINT: the shared mma building blocks
using namespace attn_fp8;  // NOLINT: the FP8-state pieces shared with the warp-specialised kernel
namespace wg = attn_wgmma;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kP = kD + 8;  // bf16 row pitch (1040 B): rows 4 banks apart, fragment loads conflict-free
constexpr int kHalf = kD / 2;
static_assert(kP == kMmaPitch && kHalf == kMmaHalf, "the shared mma helpers assume this tile shape");
static_assert(kFp8Heads == 64 && kFp8Keys == 32, "the wgmma shapes (kProbeWgmma) assume this tile shape");
constexpr int kHalfKeys = kFp8Keys / 2;
constexpr int kStageBytes = kHalfKeys * (kData + 8);
constexpr int kResolve = kThreads;  // row pointers resolved at a time (one per thread)
constexpr int kTilesPerResolve = kResolve / kFp8Keys;

// One bf16 key tile: rows at pitch kP, or (kWg: kProbeWgmma) attn_wgmma's core matrices.
template <bool kWg>
constexpr size_t kTileBytes = size_t(kFp8Keys) * (kWg ? kD : kP) * 2;

// Shared memory of the two tile loops (kProbeSerial selects the serial one): the serial loop (session 12) keeps one
// bf16 key tile and a ring of 10 half tiles (5 tiles in flight); the overlapped loop (the kernel, session 15) two
// key tiles (tile n + 1 is dequantised while tile n's P V runs) and a ring of 8 half tiles (3 tiles in flight past
// the one being dequantised). Byte offsets, all multiples of 16.
template <bool kSerial, bool kWg>
struct Smem {
  static constexpr int kStages = kSerial ? 10 : 8;  // half tiles in the ring
  static constexpr int kKeyTiles = kSerial ? 1 : 2;
  static constexpr size_t kOffQ = 0;                                               // bf16 [64][kP] (kWg: q_off)
  static constexpr size_t kOffK = kOffQ + size_t(kFp8Heads) * (kWg ? kD : kP) * 2;  // bf16 [kKeyTiles] key tiles
  static constexpr size_t kOffStage = kOffK + kKeyTiles * kTileBytes<kWg>;          // [kStages][16 x 576, 16 x 8]
  static constexpr size_t kOffX = kOffStage + size_t(kStages) * kStageBytes;       // f32 [8][16][32]
  static constexpr size_t kOffRows = kOffX + size_t(kWarps) * 16 * 32 * 4;         // const uint8_t* [2][2][kResolve]
  static constexpr size_t kBytes = kOffRows + 4 * kResolve * sizeof(const uint8_t*);  // serial 217,856; else 232,448
  static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
  static_assert(kStages % 2 == 0 && kStages >= 4 && kStages / 2 + 2 < kTilesPerResolve, "ring vs resolve chunks");
};

// Row pointer arrays: data pointers [2][kResolve] then scale pointers [2][kResolve]; key k of the split sits in
// chunk k / kResolve's half (chunk & 1).
__device__ __forceinline__ int row_slot(int64_t k) { return int((k / kResolve) & 1) * kResolve + int(k % kResolve); }

struct Rows {
  const uint8_t** data;
  const uint8_t** scales;
};

// Half tile hf (keys 16 hf .. +15 of the split) into ring slot hf % kStages as one commit group (empty past the
// split's end, so the wait count stays uniform).
template <int kStages>
__device__ __forceinline__ void issue(const Rows& rows, int64_t hf, int64_t nhalves, uint8_t* stage) {
  if (hf < nhalves) {
    const int base = row_slot(hf * kHalfKeys);
    uint8_t* dst = stage + (hf % kStages) * kStageBytes;
    for (int c = threadIdx.x; c < kHalfKeys * kChunksPerKey + kHalfKeys; c += kThreads) {
      if (c < kHalfKeys * kChunksPerKey) {
        const int r = c / kChunksPerKey, ch = c % kChunksPerKey;
        const uint8_t* src = rows.data[base + r];
        if (src != nullptr)
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst + r * kData + 16 * ch)),
                       "l"(src + 16 * ch)
                       : "memory");
      } else {
        const int r = c - kHalfKeys * kChunksPerKey;
        const uint8_t* src = rows.scales[base + r];
        if (src != nullptr)
          asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst + kHalfKeys * kData + 8 * r)),
                       "l"(src)
                       : "memory");
      }
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Tile n (cur: its 32 data pointers) from half tiles 2n, 2n+1 of the ring into the bf16 key tile; zero rows for
// missing keys. kWg: into attn_wgmma's core matrices, chunk c being key r = 8 ((c / 8) % 4) + c % 8, chunk
// ((c / 32) + (c % 8) / 2) % 36 of it (the 8 threads of a 16-byte access phase read 8 keys 576 bytes apart at chunks
// in 8 different bank groups and write 8 rows of one core matrix), each writer fencing for the wgmma reads.
template <int kStages, bool kWg>
__device__ __forceinline__ void to_bf16(const uint8_t* const* cur, int64_t n, const uint8_t* stage,
                                        __nv_bfloat16* ks) {
  for (int c = threadIdx.x; c < kFp8Keys * kChunksPerKey; c += kThreads) {
    int r, ch;
    if constexpr (kWg) {
      const int i = c & 7, j = c >> 3;
      r = 8 * (j & 3) + i;
      ch = ((j >> 2) + (i >> 1)) % kChunksPerKey;
    } else {
      r = c / kChunksPerKey;
      ch = c % kChunksPerKey;
    }
    const uint8_t* half = stage + ((2 * n + r / kHalfKeys) % kStages) * kStageBytes;
    const int rr = r % kHalfKeys;
    const bool nope = ch < int(kKvNope) / 16;
    // NoPE chunk ch: dims 16 ch .. + 15; RoPE chunk: 8 bf16 at dims kKvNope + 8 (ch - 28).
    const int d = nope ? 16 * ch : int(kKvNope) + 8 * (ch - int(kKvNope) / 16);
    __nv_bfloat16* lo = kWg ? ks + wg::k_off(r, d) : ks + r * kP + d;
    __nv_bfloat16* hi = kWg ? ks + wg::k_off(r, d + 8) : lo + 8;
    if (cur[r] == nullptr) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(lo) = z;
      if (nope) *reinterpret_cast<uint4*>(hi) = z;
      continue;
    }
    const uint4 v = *reinterpret_cast<const uint4*>(half + rr * kData + 16 * ch);
    if (nope) {
      dequant16(v, half[kHalfKeys * kData + 8 * rr + ch / 4], lo, hi);
    } else {
      *reinterpret_cast<uint4*>(lo) = v;  // bf16 RoPE channels
    }
  }
  if constexpr (kWg) wg::fence_proxy_async();
}

// q rows h0 .. h0+63 of token t -> bf16 tile (zero rows for heads >= H); kWg: in attn_wgmma's core matrices, a warp
// taking 8 heads x 4 dim groups (8 lanes write the 8 rows of one core matrix; 128 contiguous bytes a head).
template <bool kBf16, bool kWg>
__device__ __forceinline__ void load_q(const void* q, int64_t t, int64_t h0, int64_t H, __nv_bfloat16* qs) {
#pragma unroll 8
  for (int c = threadIdx.x; c < kFp8Heads * kD / 8; c += kThreads) {
    const int r = kWg ? (c & 7) + 8 * ((c >> 5) & 7) : c / (kD / 8);
    const int c8 = kWg ? ((c >> 3) & 3) + 4 * (c >> 8) : c % (kD / 8);
    const uint4 out = attn_fp8::q_chunk<kBf16>(q, t, h0 + r, H, c8);
    *reinterpret_cast<uint4*>(qs + (kWg ? wg::q_off(r, 8 * c8) : r * kP + 8 * c8)) = out;
  }
  if constexpr (kWg) wg::fence_proxy_async();
}

// A tile's first half: this warp's partial scores (its 256 dims) into s and its exchange slot of sx.
template <int kProbe>
__device__ __forceinline__ void tile_scores(const __nv_bfloat16* qs, const __nv_bfloat16* ks, float* sx, int hr,
                                            int d0, float (&s)[4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (kProbe & kProbeNoQk) {
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i >> 2][i & 3] = 0.0f;
  } else if constexpr ((kProbe & kProbeWgmma) != 0) {
    wg::qk_wg(smem_u32(qs), smem_u32(ks), d0, s);
  } else {
    qk_half(qs, ks, hr, d0, s);
  }
  float* mine = sx + warp * 16 * 32;
#pragma unroll
  for (int i = 0; i < 16; ++i) mine[i * 32 + lane] = s[i >> 2][i & 3];
}

// Its second half, after a barrier: the other dim half's scores added, online softmax, rescale, P V (kProbeWgmma:
// issued, in flight on return: finish with wg::pv_wait before acc is touched or the key tile is overwritten).
template <int kProbe>
__device__ __forceinline__ void tile_update(const __nv_bfloat16* ks, const float* sx, int d0, uint32_t valid,
                                            float scale, float (&s)[4][4], float (&m)[2], float (&l)[2],
                                            float (&acc)[32][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* other = sx + (warp ^ 4) * 16 * 32;  // the same heads, the other 256 dims
#pragma unroll
  for (int i = 0; i < 16; ++i) s[i >> 2][i & 3] += other[i * 32 + lane];
  float alpha[2] = {1.0f, 1.0f};
  if (!(kProbe & kProbeNoSoftmax)) softmax_tile(s, valid, scale, m, l, alpha);
  rescale_rows(acc, alpha);
  if constexpr ((kProbe & kProbeNoPv) != 0) return;
  if constexpr ((kProbe & kProbeWgmma) != 0) {
    wg::pv_issue(s, smem_u32(ks), d0, acc);
  } else {
    pv_half(s, ks, d0, acc);
  }
}

// kProbe & kProbeSerial: the session-12 loop (three barriers a tile: staged -> dequantise -> key tile ready ->
// scores -> exchange -> softmax, P V). Otherwise the overlapped loop, two barriers a tile: tile n's scores (B1) then,
// while other warps still run tile n's softmax and P V, tile n + 1 is dequantised into the other key tile (B2;
// kProbeWgmma: the P V issued first, in flight during the dequantisation). The
// arithmetic per tile is the same in both (same tiles, same order): their outputs are bitwise equal.
template <bool kQBf16, int kProbe = 0>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_fp8_kernel(SparseAttentionFp8Params p, const void* q, float* o, float* ws) {
  constexpr bool kSerial = (kProbe & kProbeSerial) != 0, kWg = (kProbe & kProbeWgmma) != 0;
  using L = Smem<kSerial, kWg>;
  constexpr size_t kTileElems = kTileBytes<kWg> / 2;
  constexpr int kStages = L::kStages;
  constexpr bool kLoads = !(kProbe & kProbeNoLoads), kDequant = !(kProbe & kProbeNoDequant);
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + L::kOffQ);
  __nv_bfloat16* kb = reinterpret_cast<__nv_bfloat16*>(smem + L::kOffK);  // [kKeyTiles] key tiles
  uint8_t* stage = smem + L::kOffStage;
  float* sx = reinterpret_cast<float*>(smem + L::kOffX);
  const Rows rows{reinterpret_cast<const uint8_t**>(smem + L::kOffRows),
                  reinterpret_cast<const uint8_t**>(smem + L::kOffRows) + 2 * kResolve};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hr = 16 * (warp & 3), d0 = kHalf * (warp >> 2);
  const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kFp8Heads, split = blockIdx.z;
  const int64_t n0 = list_len(p.keys[0], t), n01 = n0 + list_len(p.keys[1], t), nkeys = n01 + list_len(p.keys[2], t);
  int64_t kbeg, kend;
  attn_split_range(nkeys, split, p.num_splits, 0, kFp8Keys, kbeg, kend);
  const int64_t nk = kend > kbeg ? kend - kbeg : 0, ntiles = (nk + kFp8Keys - 1) / kFp8Keys, nhalves = 2 * ntiles;
  auto resolve = [&](int64_t c) {  // row pointers of keys kResolve * c .. of the split
    const int64_t k = c * kResolve + threadIdx.x;
    const int slot = row_slot(k);
    rows.data[slot] = nullptr;
    rows.scales[slot] = nullptr;
    if (k < nk) {
      int src = 0;
      const int64_t r = key_cache_row(p, t, n0, n01, kbeg + k, src);
      if (r >= 0) {
        rows.data[slot] = p.keys[src].cache + kv_data_offset(p.keys[src].pages, r);
        rows.scales[slot] = p.keys[src].cache + kv_scale_offset(p.keys[src].pages, r);
      }
    }
  };
  auto tile_rows = [&](int64_t n) -> const uint8_t* const* { return rows.data + row_slot(n * kFp8Keys); };

  resolve(0);
  __syncthreads();
  if (kLoads)
    for (int hf = 0; hf < kStages; ++hf) issue<kStages>(rows, hf, nhalves, stage);
  load_q<kQBf16, kWg>(q, t, h0, p.heads, qs);

  float acc[32][4];
#pragma unroll
  for (int nt = 0; nt < 32; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float s[4][4];
  if (kSerial) {
    for (int64_t n = 0; n < ntiles; ++n) {
      if (kLoads) asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");  // tile n's halves
      __syncthreads();
      if (kDequant) to_bf16<kStages, kWg>(tile_rows(n), n, stage, kb);
      const uint32_t valid = __ballot_sync(dev::kFull, tile_rows(n)[lane] != nullptr);
      __syncthreads();  // key tile ready; its two ring slots are free
      if (kLoads) {
        issue<kStages>(rows, 2 * n + kStages, nhalves, stage);
        issue<kStages>(rows, 2 * n + kStages + 1, nhalves, stage);
      }
      if (n % kTilesPerResolve == 0 && (n / kTilesPerResolve + 1) * kResolve < nk) resolve(n / kTilesPerResolve + 1);
      tile_scores<kProbe>(qs, kb, sx, hr, d0, s);
      __syncthreads();
      tile_update<kProbe>(kb, sx, d0, valid, p.scale, s, m, l, acc);
      if constexpr (kWg) wg::pv_wait(acc);
    }
  } else if (ntiles > 0) {
    // Tile 0 into key tile 0. Groups committed: one a half, in order, so "halves up to h complete" is "at most
    // (halves committed - 1 - h) pending": kStages - 2 both here and in the loop.
    if (kLoads) asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
    __syncthreads();  // tile 0's bytes (every thread's copies) and q visible
    if (kDequant) to_bf16<kStages, kWg>(tile_rows(0), 0, stage, kb);
    __syncthreads();  // key tile 0 ready; its ring slots are free
    if (kLoads) {
      issue<kStages>(rows, kStages, nhalves, stage);
      issue<kStages>(rows, kStages + 1, nhalves, stage);
    }
    for (int64_t n = 0; n < ntiles; ++n) {
      const __nv_bfloat16* ks = kb + (n & 1) * kTileElems;
      const uint32_t valid = __ballot_sync(dev::kFull, tile_rows(n)[lane] != nullptr);
      tile_scores<kProbe>(qs, ks, sx, hr, d0, s);
      const bool next = n + 1 < ntiles;
      // Committed: halves 0 .. 2n + kStages + 1; tile n + 1's are 2n + 2, 2n + 3.
      if (kLoads && next) asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
      __syncthreads();  // B1: scores exchanged; tile n + 1's bytes visible; every warp is past tile n - 1's P V
      __nv_bfloat16* kn = kb + ((n + 1) & 1) * kTileElems;
      if constexpr (kWg) {
        tile_update<kProbe>(ks, sx, d0, valid, p.scale, s, m, l, acc);  // P V in flight ...
        if (kDequant && next) to_bf16<kStages, kWg>(tile_rows(n + 1), n + 1, stage, kn);
        wg::pv_wait(acc);  // ... while tile n + 1 is dequantised
      } else {
        if (kDequant && next) to_bf16<kStages, kWg>(tile_rows(n + 1), n + 1, stage, kn);
        tile_update<kProbe>(ks, sx, d0, valid, p.scale, s, m, l, acc);
      }
      __syncthreads();  // B2: key tile n + 1 ready, its ring slots free; sx read; tile n's key tile free
      if (kLoads) {  // tile n + 1 + kStages / 2 into the slots tile n + 1 left
        issue<kStages>(rows, 2 * (n + 1) + kStages, nhalves, stage);
        issue<kStages>(rows, 2 * (n + 1) + kStages + 1, nhalves, stage);
      }
      // Chunk c + 1's row pointers into chunk c - 1's buffer (its last tile, 8c - 1, was dequantised at n - 2 and
      // its mask read at n - 1); first read by the issue at n + 3 (tile 8c + 8).
      if (n % kTilesPerResolve == 0 && (n / kTilesPerResolve + 1) * kResolve < nk) resolve(n / kTilesPerResolve + 1);
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  const int64_t pos = p.rope_dim > 0 ? int64_t(p.pos[t]) : 0;
  write_rows(acc, m, l, h0 + hr, d0, t, split, p.heads, p.num_splits, kD, kPart, p.num_splits == 1, p.sinks, o, ws,
             [&](float& e0, float& e1, int d) { out_rope(e0, e1, d, p, pos); });
}

// Merge of the splits' partials: one block of 128 threads per (token, head), 4 channels a thread.
__global__ void sparse_attention_fp8_combine_kernel(SparseAttentionFp8Params p, const float* ws, float* o) {
  const int64_t t = blockIdx.x, h = blockIdx.y, H = p.heads, S = p.num_splits;
  const float* part = ws + (t * S * H + h) * kPart;  // float4 loads: kPart keeps every row 16-byte aligned
  const int64_t sstride = H * kPart;
  const float sink = p.sinks[h];
  float M = sink;
  for (int64_t s = 0; s < S; ++s) M = fmaxf(M, part[s * sstride + kD]);
  float den = expf(sink - M);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const int d = 4 * threadIdx.x;
  for (int64_t s = 0; s < S; ++s) {
    const float* ps = part + s * sstride;
    const float w = expf(ps[kD] - M);
    den += w * ps[kD + 1];
    const float4 v = *reinterpret_cast<const float4*>(ps + d);
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  const float inv = 1.0f / den;
  float e[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
  const int64_t pos = p.rope_dim > 0 ? int64_t(p.pos[t]) : 0;
  out_rope(e[0], e[1], d, p, pos);
  out_rope(e[2], e[3], d + 2, p, pos);
  *reinterpret_cast<float4*>(o + (t * H + h) * kD + d) = make_float4(e[0], e[1], e[2], e[3]);
}
}  // namespace

void launch_sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                 void* stream) {
  const dim3 grid(unsigned(p.T), unsigned((p.heads + kFp8Heads - 1) / kFp8Heads), unsigned(p.num_splits));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.q_bf16) {
    cudaFuncSetAttribute(sparse_attention_fp8_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(Smem<false, false>::kBytes));
    sparse_attention_fp8_kernel<true><<<grid, kThreads, Smem<false, false>::kBytes, s>>>(p, q, o, workspace);
  } else {
    cudaFuncSetAttribute(sparse_attention_fp8_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(Smem<false, false>::kBytes));
    sparse_attention_fp8_kernel<false><<<grid, kThreads, Smem<false, false>::kBytes, s>>>(p, q, o, workspace);
  }
}

namespace {
template <int kProbe>
void launch_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, cudaStream_t s) {
  const dim3 grid(unsigned(p.T), unsigned((p.heads + kFp8Heads - 1) / kFp8Heads), unsigned(p.num_splits));
  constexpr size_t kBytes = Smem<(kProbe & kProbeSerial) != 0, (kProbe & kProbeWgmma) != 0>::kBytes;
  cudaFuncSetAttribute(sparse_attention_fp8_kernel<false, kProbe>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(kBytes));
  sparse_attention_fp8_kernel<false, kProbe><<<grid, kThreads, kBytes, s>>>(p, q, o, workspace);
}
}  // namespace

bool launch_sparse_attention_fp8_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                       int probe, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (probe) {
    case kProbeNoQk: launch_probe<kProbeNoQk>(p, q, o, workspace, s); break;
    case kProbeNoPv: launch_probe<kProbeNoPv>(p, q, o, workspace, s); break;
    case kProbeNoSoftmax: launch_probe<kProbeNoSoftmax>(p, q, o, workspace, s); break;
    case kProbeNoDequant: launch_probe<kProbeNoDequant>(p, q, o, workspace, s); break;
    case kProbeNoLoads: launch_probe<kProbeNoLoads>(p, q, o, workspace, s); break;
    case kProbeNoLoads | kProbeNoDequant: launch_probe<kProbeNoLoads | kProbeNoDequant>(p, q, o, workspace, s); break;
    case kProbeSerial: launch_probe<kProbeSerial>(p, q, o, workspace, s); break;
    case kProbeWgmma: launch_probe<kProbeWgmma>(p, q, o, workspace, s); break;
    case kProbeNoQk | kProbeNoPv | kProbeNoSoftmax:
      launch_probe<kProbeNoQk | kProbeNoPv | kProbeNoSoftmax>(p, q, o, workspace, s);
      break;
    default: return false;
  }
  if (p.num_splits > 1) launch_sparse_attention_fp8_combine(p, workspace, o, stream);
  return true;
}

void launch_sparse_attention_fp8_combine(const SparseAttentionFp8Params& p, const float* workspace, float* o,
                                         void* stream) {
  const dim3 grid(unsigned(p.T), unsigned(p.heads));
  sparse_attention_fp8_combine_kernel<<<grid, kD / 4, 0, static_cast<cudaStream_t>(stream)>>>(p, workspace, o);
}

}  // namespace dsinfer::ops::cuda::detail
