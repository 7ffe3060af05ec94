// CUDA Lightning Indexer kernels (see indexer_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/func_smem.h"
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/indexer/indexer_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
constexpr int kKB = kIdxKeysPerBlock;
constexpr int kGroups = 4;                          // head groups per block (256 threads = 64 keys x 4)
constexpr int kMaxHpg = kIdxMaxHeads / kGroups;     // heads per group

__device__ __forceinline__ int64_t visible(int64_t pos, int64_t m, int64_t max_visible) {
  const int64_t n = (pos + 1) / m;
  return n < max_visible ? n : max_visible;
}

__global__ void __launch_bounds__(kKB * kGroups) indexer_scores_kernel(StepDevice st, LayerStateView v,
                                                                       IndexerCudaParams p, const float* q,
                                                                       const float* weights, int64_t max_visible,
                                                                       float* scores) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ float idx_smem[];
  const int dim = int(p.dim), heads = int(p.heads), kstride = dim + 4;
  float* qs = idx_smem;                 // [heads][dim]
  float* ks = qs + heads * dim;         // [kKB][dim + 4]
  __shared__ float red[kGroups][kKB];
  const int64_t t = blockIdx.x, pos = st.pos[t], N = visible(pos, p.m, max_visible);
  const int64_t j0 = int64_t(blockIdx.y) * kKB;
  if (j0 >= N) return;  // block-uniform
  const int32_t s = st.seq_of_token[t];
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  const int d4 = dim / 4;
  const float4* qg = reinterpret_cast<const float4*>(q + t * heads * dim);
  for (int i = threadIdx.x; i < heads * d4; i += blockDim.x) reinterpret_cast<float4*>(qs)[i] = qg[i];
  for (int i = threadIdx.x; i < kKB * d4; i += blockDim.x) {
    const int r = i / d4, c = i % d4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j0 + r < N) {
      val = reinterpret_cast<const float4*>(v.index_key(table, j0 + r))[c];
    }
    *reinterpret_cast<float4*>(ks + r * kstride + 4 * c) = val;
  }
  __syncthreads();
  const int kk = threadIdx.x % kKB, hg = threadIdx.x / kKB;
  const int hpg = (heads + kGroups - 1) / kGroups;
  float acc[kMaxHpg];
#pragma unroll
  for (int h = 0; h < kMaxHpg; ++h) acc[h] = 0.0f;
  for (int c = 0; c < d4; ++c) {
    const float4 k4 = *reinterpret_cast<const float4*>(ks + kk * kstride + 4 * c);
#pragma unroll
    for (int hh = 0; hh < kMaxHpg; ++hh) {
      const int h = hg * hpg + hh;
      if (hh < hpg && h < heads) {
        const float4 q4 = *reinterpret_cast<const float4*>(qs + h * dim + 4 * c);
        acc[hh] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
      }
    }
  }
  float part = 0.0f;
#pragma unroll
  for (int hh = 0; hh < kMaxHpg; ++hh) {
    const int h = hg * hpg + hh;
    if (hh < hpg && h < heads) part += weights[t * heads + h] * fmaxf(acc[hh], 0.0f);
  }
  red[hg][kk] = part;
  __syncthreads();
  if (threadIdx.x < kKB && j0 + threadIdx.x < N) {
    float total = 0.0f;
    for (int g = 0; g < kGroups; ++g) total += red[g][threadIdx.x];
    scores[t * max_visible + j0 + threadIdx.x] = total * rsqrtf(float(dim));
  }
}

// ---- Scores on tensor cores (FP8 state): keys are e4m3 codes times a power-of-two row scale, so a code is exact in
// bf16 and the scale can wait for the epilogue. q is split into bf16 hi + mid + lo (exact for fp32 values outside
// the subnormal range); a block whose q rows are all bf16-exact (the official FP4-simulated queries) runs one split.
// Products of bf16 are exact in fp32, so the score differs from the fp32 kernel only by the order of the sums.
constexpr int kTcKeys = 128;                 // keys per tile (4 warps x 32)
constexpr int kTcMaxTiles = 4;               // tiles per block (<= 4): the token's q is converted once per block
constexpr int kTcThreads = 128;                          // = kTcKeys: thread i loads key i's scale
constexpr int kTcHeads = kIdxMaxHeads;       // heads padded to 64 with zero rows and zero weights
constexpr int kTcDim = kIdxTcDim;            // 128 (the FP8 key format's dim)
constexpr int kTcPitch = kTcDim + 8;         // bf16 row pitch (272 B): ldmatrix rows 4 banks apart
constexpr int kTcSplits = 3;
constexpr size_t kTcSmem = size_t(kTcHeads + kTcKeys) * kTcPitch * 2 + (kTcKeys + kTcHeads) * 4;  // 52,992 B

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two e4m3 codes (low byte first) -> two bf16 (low half first), exactly: e4m3 -> f16 is exact, f16 -> f32 too, and
// an e4m3 value has 4 significant bits.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two_codes & 0xFFFFu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ uint2 pack4_bf16(const __nv_bfloat16 (&x)[4]) {
  uint2 r;
  r.x = uint32_t(__bfloat16_as_ushort(x[0])) | (uint32_t(__bfloat16_as_ushort(x[1])) << 16);
  r.y = uint32_t(__bfloat16_as_ushort(x[2])) | (uint32_t(__bfloat16_as_ushort(x[3])) << 16);
  return r;
}

// Split `split` (0 = hi, 1 = mid, 2 = lo) of the token's q rows into qs (bf16, heads padded with zeros); returns
// whether any value of this thread's share is not bf16-exact (hi alone is not the value).
template <int kThreads>
__device__ __forceinline__ bool write_q_split(__nv_bfloat16* qs, const float* qt, int heads, int split, int tid) {
  bool inexact = false;
  for (int i = tid; i < kTcHeads * (kTcDim / 4); i += kThreads) {
    const int h = i / (kTcDim / 4), c = i % (kTcDim / 4);
    const float4 x4 = h < heads ? reinterpret_cast<const float4*>(qt + h * kTcDim)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    const float x[4] = {x4.x, x4.y, x4.z, x4.w};
    __nv_bfloat16 part[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const __nv_bfloat16 hi = __float2bfloat16_rn(x[e]);
      const float r1 = x[e] - __bfloat162float(hi);
      const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
      part[e] = split == 0 ? hi : split == 1 ? mid : __float2bfloat16_rn(r1 - __bfloat162float(mid));
      inexact = inexact || r1 != 0.0f;
    }
    *reinterpret_cast<uint2*>(qs + h * kTcPitch + 4 * c) = pack4_bf16(part);
  }
  return inexact;
}

// This thread's share of a 128-key tile from j0: key rows tid / 8 + (kThreads / 8) it, 16 codes at 16 (tid % 8), and
// the scale of key tid (tid < 128); zeros past N. Loaded into registers (the next tile's, during this tile's MMAs).
template <int kThreads>
struct KeyTileRegs {
  static constexpr int kLoads = kTcKeys * kTcDim / 16 / kThreads;
  static constexpr int kRowStep = kThreads / 8;
  uint4 codes[kLoads];
  float scale;
};
template <int kThreads>
__device__ __forceinline__ void load_key_tile(KeyTileRegs<kThreads>& k, const LayerStateView& v, const int32_t* table,
                                              int64_t j0, int64_t N, int tid) {
  using R = KeyTileRegs<kThreads>;
  const uint8_t* kbase = reinterpret_cast<const uint8_t*>(v.blocks);
  const KvPages pages = v.index_key_pages();
#pragma unroll
  for (int it = 0; it < R::kLoads; ++it) {
    const int64_t j = j0 + tid / 8 + R::kRowStep * it;
    k.codes[it] = make_uint4(0u, 0u, 0u, 0u);
    if (j < N)
      k.codes[it] = *reinterpret_cast<const uint4*>(kbase + idx_code_offset(pages, v.entry_index(table, j)) +
                                                    16 * (tid % 8));
  }
  k.scale = 0.0f;
  if (tid < kTcKeys && j0 + tid < N) {
    const int64_t row = v.entry_index(table, j0 + tid);
    k.scale = __uint_as_float(*reinterpret_cast<const uint32_t*>(kbase + idx_scale_offset(pages, row)));
  }
}
template <int kThreads>
__device__ __forceinline__ void store_key_tile(const KeyTileRegs<kThreads>& k, __nv_bfloat16* ks, float* kscale,
                                               int tid) {
  using R = KeyTileRegs<kThreads>;
#pragma unroll
  for (int it = 0; it < R::kLoads; ++it) {
    const uint4 c = k.codes[it];
    uint4* dst = reinterpret_cast<uint4*>(ks + (tid / 8 + R::kRowStep * it) * kTcPitch + 16 * (tid % 8));
    dst[0] = make_uint4(e4m3x2_to_bf16x2(c.x), e4m3x2_to_bf16x2(c.x >> 16), e4m3x2_to_bf16x2(c.y),
                        e4m3x2_to_bf16x2(c.y >> 16));
    dst[1] = make_uint4(e4m3x2_to_bf16x2(c.z), e4m3x2_to_bf16x2(c.z >> 16), e4m3x2_to_bf16x2(c.w),
                        e4m3x2_to_bf16x2(c.w >> 16));
  }
  if (tid < kTcKeys) kscale[tid] = k.scale;
}

__device__ __forceinline__ void zero_acc(float (&acc)[4][4][4]) {
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
}

// The ReLU-weighted sum over the lane's 8 heads (16 mt + g and 16 mt + g + 8) of key 8 nt + 2 q4 + e of the warp,
// in the one order both kernels sum it.
__device__ __forceinline__ float head_partial(const float* w, const float (&acc)[4][4][4], int nt, int e, int g) {
  float x = 0.0f;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    x += w[mt * 16 + g] * fmaxf(acc[mt][nt][e], 0.0f);
    x += w[mt * 16 + g + 8] * fmaxf(acc[mt][nt][2 + e], 0.0f);
  }
  return x;
}

// One warp's share of a tile: its 32 keys from n0 against the 64 (padded) heads of qs, accumulated into
// acc[m-tile][n-tile] (kk = 0..7 in order, so the fp32 sums are the same whichever kernel calls it).
__device__ __forceinline__ void mma_warp_keys(float (&acc)[4][4][4], const __nv_bfloat16* qs,
                                              const __nv_bfloat16* ks, int n0, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTcDim / 16; ++kk) {
    uint32_t b[4][2];
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t r[4];
      const int n = n0 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
      ldsm_x4(r, ks + n * kTcPitch + kk * 16 + ((lane >> 3) & 1) * 8);
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      uint32_t a[4];
      ldsm_x4(a, qs + (mt * 16 + (lane & 15)) * kTcPitch + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma_16816(acc[mt][nt], a, b[nt][0], b[nt][1]);
    }
  }
}

// Block = one token x `tiles` tiles of 128 keys; in a tile warp w owns keys 32w..32w+31 against all 64 (padded)
// heads: acc[m-tile][n-tile]. Shared memory holds one q split: with bf16-exact q (one split) it is written once;
// otherwise each split of each tile is rewritten from q (three MMA passes a tile).
// (4 blocks an SM: 128 registers, 53 KB of shared memory each.)
__global__ void __launch_bounds__(kTcThreads, 4)
    indexer_scores_tc_kernel(StepDevice st, LayerStateView v, IndexerCudaParams p, const float* q,
                             const float* weights, int64_t max_visible, int tiles, float* scores) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ __align__(16) unsigned char tc_smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(tc_smem);     // [head][kTcPitch], one split
  __nv_bfloat16* ks = qs + kTcHeads * kTcPitch;                       // [key][kTcPitch]
  float* kscale = reinterpret_cast<float*>(ks + kTcKeys * kTcPitch);  // [key]
  float* ws = kscale + kTcKeys;                                       // [head]
  const int64_t t = blockIdx.x, N = visible(st.pos[t], p.m, max_visible);
  const int64_t jb = int64_t(blockIdx.y) * kTcKeys * tiles;
  if (jb >= N) return;  // block-uniform
  const int heads = int(p.heads), tid = int(threadIdx.x);
  const int32_t* table = st.block_tables + int64_t(st.seq_of_token[t]) * st.table_stride;
  const float* qt = q + t * heads * kTcDim;
  KeyTileRegs<kTcThreads> next;
  load_key_tile<kTcThreads>(next, v, table, jb, N, tid);
  const bool inexact = write_q_split<kTcThreads>(qs, qt, heads, 0, tid);
  if (tid < kTcHeads) ws[tid] = tid < heads ? weights[t * heads + tid] : 0.0f;
  const int nsplit = __syncthreads_or(inexact) ? kTcSplits : 1;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3, n0 = warp * 32;
  const float rs = rsqrtf(float(kTcDim));
  for (int tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = jb + int64_t(tile) * kTcKeys;
    if (j0 >= N) break;             // block-uniform
    if (tile > 0) __syncthreads();  // the previous tile's keys and scales are read
    store_key_tile<kTcThreads>(next, ks, kscale, tid);
    __syncthreads();
    if (tile + 1 < tiles && j0 + kTcKeys < N) load_key_tile<kTcThreads>(next, v, table, j0 + kTcKeys, N, tid);
    float acc[4][4][4];
    zero_acc(acc);
    for (int s = 0; s < nsplit; ++s) {
      if (nsplit > 1 && (s > 0 || tile > 0)) {  // qs holds another split: rewrite it (block-uniform)
        __syncthreads();
        write_q_split<kTcThreads>(qs, qt, heads, s, tid);
        __syncthreads();
      }
      mma_warp_keys(acc, qs, ks, n0, lane);
    }
    // Epilogue: key 8nt + 2q4 + e of the warp; the lane holds heads 16mt + g and 16mt + g + 8.
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float part = head_partial(ws, acc, nt, e, g);
        part += __shfl_xor_sync(0xffffffffu, part, 4);
        part += __shfl_xor_sync(0xffffffffu, part, 8);
        part += __shfl_xor_sync(0xffffffffu, part, 16);
        const int n = n0 + nt * 8 + 2 * q4 + e;
        if (g == 0 && j0 + n < N) scores[t * max_visible + j0 + n] = part * kscale[n] * rs;
      }
    }
  }
}

// ---- Scores on tensor cores, several tokens a block (prefill): kTcTok consecutive tokens of the step share each
// converted key tile (loaded and converted once for all of them), each token's 64 heads x 128 q being the A operand
// of its own products. 8 warps: warp w takes keys 32 (w % 4) .. + 31 of the tile for tokens 2 (w / 4) and
// 2 (w / 4) + 1, in turn. Tokens of different sequences in one block (a ragged step) form runs, each with its own
// keys; the key range is the run's largest visible count, and each token's scores are masked to its own. The
// per-head products and sums are the one-token kernel's (mma_warp_keys, same operands); the epilogue sums the heads
// by a transposing butterfly over the same lane pairs (xor 4, then 8, then 16) as that kernel's shuffles, so every
// score has the one-token kernel's bits (fp32 adds commute), while each lane ends with one key to store.
constexpr int kTcTok = 4;
constexpr int kTcmThreads = 256;
constexpr size_t kTcmSmem =
    size_t(kTcTok * kTcHeads + kTcKeys) * kTcPitch * 2 + (kTcKeys + kTcTok * kTcHeads) * 4;  // 105,984 B

__global__ void __launch_bounds__(kTcmThreads, 2)
    indexer_scores_tc_tokens_kernel(StepDevice st, LayerStateView v, IndexerCudaParams p, const float* q,
                                    const float* weights, int64_t max_visible, int tiles, float* scores) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ __align__(16) unsigned char tcm_smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(tcm_smem);    // [token][head][kTcPitch], one split
  __nv_bfloat16* ks = qs + kTcTok * kTcHeads * kTcPitch;              // [key][kTcPitch]
  float* kscale = reinterpret_cast<float*>(ks + kTcKeys * kTcPitch);  // [key]
  float* ws = kscale + kTcKeys;                                       // [token][head]
  const int64_t t0 = int64_t(blockIdx.x) * kTcTok;
  const int tn = int(st.T - t0 < kTcTok ? st.T - t0 : kTcTok);
  int64_t n_of[kTcTok];
  int32_t seq_of[kTcTok];
  int64_t nmax = 0;
#pragma unroll
  for (int s = 0; s < kTcTok; ++s) {
    n_of[s] = s < tn ? visible(st.pos[t0 + s], p.m, max_visible) : 0;
    seq_of[s] = s < tn ? st.seq_of_token[t0 + s] : -1;
    nmax = n_of[s] > nmax ? n_of[s] : nmax;
  }
  const int64_t jb = int64_t(blockIdx.y) * kTcKeys * tiles;
  if (jb >= nmax) return;  // block-uniform
  const int heads = int(p.heads), tid = int(threadIdx.x);
  bool inexact = false;
  for (int s = 0; s < tn; ++s)
    inexact = write_q_split<kTcmThreads>(qs + s * kTcHeads * kTcPitch, q + (t0 + s) * heads * kTcDim, heads, 0, tid) ||
              inexact;
  for (int i = tid; i < kTcTok * kTcHeads; i += kTcmThreads) {
    const int s = i / kTcHeads, h = i % kTcHeads;
    ws[i] = s < tn && h < heads ? weights[(t0 + s) * heads + h] : 0.0f;
  }
  const int nsplit = __syncthreads_or(inexact) ? kTcSplits : 1;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, q4 = lane & 3, n0 = (warp & 3) * 32;
  const int first = (warp >> 2) * 2;  // this warp's tokens: first, first + 1
  const float rs = rsqrtf(float(kTcDim));
  // After the butterfly the lane holds index i = 4 (g & 1) + 2 ((g >> 1) & 1) + (g >> 2) of (nt, e) = (i / 2, i % 2).
  const int ri = 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
  const int nkey = n0 + 8 * (ri >> 1) + 2 * q4 + (ri & 1);
  for (int r0 = 0; r0 < tn;) {  // a run of tokens of one sequence: they share the key tiles
    int r1 = r0 + 1;
    while (r1 < tn && seq_of[r1] == seq_of[r0]) ++r1;
    int64_t nrun = 0;
    for (int s = r0; s < r1; ++s) nrun = n_of[s] > nrun ? n_of[s] : nrun;
    const int32_t* table = st.block_tables + int64_t(seq_of[r0]) * st.table_stride;
    if (jb < nrun) {  // block-uniform
      KeyTileRegs<kTcmThreads> next;
      load_key_tile<kTcmThreads>(next, v, table, jb, nrun, tid);
      for (int tile = 0; tile < tiles; ++tile) {
        const int64_t j0 = jb + int64_t(tile) * kTcKeys;
        if (j0 >= nrun) break;  // block-uniform
        __syncthreads();        // the previous tile's (or run's) keys and scales are read
        store_key_tile<kTcmThreads>(next, ks, kscale, tid);
        __syncthreads();
        if (tile + 1 < tiles && j0 + kTcKeys < nrun)
          load_key_tile<kTcmThreads>(next, v, table, j0 + kTcKeys, nrun, tid);  // in flight
        for (int s = r0; s < r1; ++s) {
          const bool mine = (s == first || s == first + 1) && j0 < n_of[s];  // warp-uniform
          if (nsplit == 1 && !mine) continue;  // (no barrier below when nsplit == 1)
          __nv_bfloat16* qt = qs + s * kTcHeads * kTcPitch;
          float acc[4][4][4];
          zero_acc(acc);
          for (int sp = 0; sp < nsplit; ++sp) {
            if (nsplit > 1) {  // the token's split sp (block-uniform: every thread takes every token here)
              __syncthreads();
              write_q_split<kTcmThreads>(qt, q + (t0 + s) * heads * kTcDim, heads, sp, tid);
              __syncthreads();
            }
            if (mine) mma_warp_keys(acc, qt, ks, n0, lane);
          }
          if (!mine) continue;
          const float* wt = ws + s * kTcHeads;
          float part[8];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) part[2 * nt + e] = head_partial(wt, acc, nt, e, g);
          }
          // Transposing butterfly: keep the half named by the g bit, send the other half to the partner lane.
          float h4[4], h2[2];
          const bool b0 = (g & 1) != 0, b1 = (g & 2) != 0, b2 = (g & 4) != 0;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float keep = b0 ? part[k + 4] : part[k], send = b0 ? part[k] : part[k + 4];
            h4[k] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
          }
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const float keep = b1 ? h4[k + 2] : h4[k], send = b1 ? h4[k] : h4[k + 2];
            h2[k] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
          }
          const float keep = b2 ? h2[1] : h2[0], send = b2 ? h2[0] : h2[1];
          const float total = keep + __shfl_xor_sync(0xffffffffu, send, 16);
          if (j0 + nkey < n_of[s]) scores[(t0 + s) * max_visible + j0 + nkey] = total * kscale[nkey] * rs;
        }
      }
    }
    r0 = r1;
  }
}

// ---- Top-k: radix select of the k-th largest score key per row (11 + 11 + 10 bits), then an index-ordered
// compaction. One block of 512 threads a row; the row's keys stay in shared memory when it has at most
// kIdxSelCacheKeys of them (else each scan re-reads the scores). Histograms use warp-aggregated shared atomics
// (__match_any_sync), so rows whose scores share their high bits do not serialise on one bin; the bin holding the
// k-th key is found by a block scan, not by one thread.
// Candidate form (cand_slots > 0): after pass 0 only the keys of the boundary bin (the bin holding the k-th key) are
// still undecided; every key of a higher bin is taken. When the boundary bin fits the row's slots, one more scan of
// the row writes a bit map of the keys above it (a warp's ballot is one word) and appends the boundary bin's keys
// and indices (the candidates) to shared memory; passes 1 and 2 run over the candidates only, which then mark the
// keys above tau in that map and those equal to tau in a second one, and the output is written from the two maps in
// index order (a word per key group of 32: the compaction's rule, 32 keys a step). The row's slots: min(cand_slots,
// what the dynamic shared memory holds after the row's cached keys and the two maps), so a row longer than the cache
// has the cache's room. Same tau, same ties, the same output as the full-scan form (cand_slots = 0, or a boundary
// bin larger than the row's slots), which scans the row four times with a block barrier every 512 keys in the last.
constexpr int kSelThreads = 512;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSelBins = 2048;
constexpr int kSelUnroll = 4;  // keys a thread loads before it bins them

// Order-preserving map of a float score to uint32 (larger score -> larger key); -0.0 maps like +0.0.
__device__ __forceinline__ uint32_t score_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block (kSelThreads threads); *total = the sum. warp_sums is free again on return.
__device__ int sel_exclusive_scan(int x, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = x;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int base = 0, all = 0;
  for (int w = 0; w < kSelWarps; ++w) {
    const int s = warp_sums[w];
    if (w < warp) base += s;
    all += s;
  }
  __syncthreads();
  *total = all;
  return base + incl - x;
}

struct SelBin {
  uint32_t bin;  // the bin holding rank kr (counted from the top)
  int kr;        // the rank inside it (1-based)
  int count;     // keys in the bin
};

// The bin of hist[0, nbins) holding rank kr from the top. Thread i owns bins nbins-1-per*i .. nbins-per*(i+1)
// (descending); the one whose range holds rank kr writes *s. Every thread reads *s after the closing barrier.
__device__ SelBin sel_find_bin(const uint32_t* hist, int nbins, int kr, int* warp_sums, SelBin* s) {
  const int tid = int(threadIdx.x), per = nbins / kSelThreads;
  int local = 0;
  for (int e = 0; e < per; ++e) local += int(hist[nbins - 1 - (tid * per + e)]);
  int total = 0;
  const int before = sel_exclusive_scan(local, warp_sums, &total);
  if (before < kr && kr <= before + local) {
    int cum = before;
    for (int e = 0; e < per; ++e) {
      const int b = nbins - 1 - (tid * per + e), h = int(hist[b]);
      if (cum + h >= kr) {
        *s = SelBin{uint32_t(b), kr - cum, h};
        break;
      }
      cum += h;
    }
  }
  __syncthreads();
  return *s;
}

__global__ void __launch_bounds__(kSelThreads, 3) indexer_select_kernel(StepDevice st, IndexerCudaParams p,
                                                                     const float* scores, int64_t max_visible,
                                                                     int64_t cache_keys, int64_t smem_words,
                                                                     int cand_slots, int32_t* out) {
  dsinfer::cuda::pdl_wait_then_release();
  // [smem_words]: the row's keys [N] when N <= cache_keys; then, in the candidate form, two bit maps over the row
  // [map_words] each and the candidates' keys and indices [row_slots] each.
  extern __shared__ uint32_t sel_keys[];
  __shared__ uint32_t hist[kSelBins];
  __shared__ int warp_sums[kSelWarps];
  __shared__ int tile_gt[2][kSelWarps], tile_eq[2][kSelWarps];
  __shared__ int s_count;  // candidates gathered
  __shared__ SelBin s_bin;
  const int64_t t = blockIdx.x, N = visible(st.pos[t], p.m, max_visible), K = p.topk;
  int32_t* o = out + t * K;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  if (tid == 0) s_count = 0;
  if (N <= K) {  // everything visible is selected
    for (int64_t i = tid; i < K; i += kSelThreads) o[i] = i < N ? int32_t(i) : -1;
    return;
  }
  const float* sc = scores + t * max_visible;
  const bool cached = N <= cache_keys;
  // The candidate form's maps: one bit a key, whole rounds of kSelUnroll * kSelThreads keys.
  constexpr int64_t kRound = int64_t(kSelUnroll) * kSelThreads;
  const int64_t map_words = (N + kRound - 1) / kRound * (kRound / 32);
  const int64_t row_room = (smem_words - (cached ? N : 0) - 2 * map_words) / 2;
  const int row_slots = int(row_room < cand_slots ? row_room : cand_slots);  // may be <= 0: the full scan
  const uint32_t lt = (1u << lane) - 1u;
  uint32_t prefix = 0;  // the k-th key's bits found so far
  int kr = int(K);      // rank (1-based) of the k-th key among the keys that match prefix
  int ncand = 0;        // keys in pass 0's boundary bin when the candidate form takes the row, else 0
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nbins = pass == 2 ? 1024 : 2048;
    const int above = shift + (pass == 2 ? 10 : 11);  // bits above this pass's digit
    for (int i = tid; i < nbins; i += kSelThreads) hist[i] = 0;
    __syncthreads();
    // Uniform trip count (every lane reaches the match); 4 loads in flight a thread. Element j belongs to thread
    // j % kSelThreads in every pass and in the compaction, so sel_keys[j] is read back by the thread that wrote it.
    for (int64_t base = 0; base < N; base += kSelUnroll * kSelThreads) {
      uint32_t u[kSelUnroll];
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        u[k] = 0;
        if (j < N) u[k] = pass > 0 && cached ? sel_keys[j] : score_key(sc[j]);
      }
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        if (pass == 0 && cached && j < N) sel_keys[j] = u[k];
        const bool match = j < N && (pass == 0 || (u[k] >> above) == (prefix >> above));
        const uint32_t bin = match ? (u[k] >> shift) & uint32_t(nbins - 1) : 0xFFFFFFFFu;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
      }
    }
    __syncthreads();
    const SelBin b = sel_find_bin(hist, nbins, kr, warp_sums, &s_bin);
    prefix |= b.bin << shift;
    kr = b.kr;
    if (pass == 0 && b.count <= row_slots) {  // block-uniform
      ncand = b.count;
      break;
    }
  }
  if (ncand > 0) {
    uint32_t* taken = sel_keys + (cached ? N : 0);  // [map_words] bit j: key j is above the boundary bin or tau
    uint32_t* ties = taken + map_words;             // [map_words] bit j: key j equals tau
    uint32_t* cand_key = ties + map_words;          // [row_slots], in no particular order
    int32_t* cand_idx = reinterpret_cast<int32_t*>(cand_key + row_slots);
    const uint32_t bin0 = prefix >> 21;
    // Gather: a warp's ballot of "above bin0" over its 32 consecutive keys is one word of the taken map; bin0's keys
    // are appended to the candidates (one shared atomic a warp).
    for (int64_t base = 0; base < N; base += kSelUnroll * kSelThreads) {
      uint32_t u[kSelUnroll];
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        u[k] = j < N ? (cached ? sel_keys[j] : score_key(sc[j])) : 0u;
      }
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        const uint32_t ba = __ballot_sync(0xffffffffu, j < N && (u[k] >> 21) > bin0);
        const uint32_t bc = __ballot_sync(0xffffffffu, j < N && (u[k] >> 21) == bin0);
        if (lane == 0) {
          const int64_t w = (base + k * kSelThreads) / 32 + warp;
          taken[w] = ba;
          ties[w] = 0u;
        }
        if (bc != 0u) {  // warp-uniform
          int c0 = 0;
          if (lane == 0) c0 = atomicAdd(&s_count, __popc(bc));
          c0 = __shfl_sync(0xffffffffu, c0, 0);
          if ((bc >> lane) & 1u) {
            const int c = c0 + __popc(bc & lt);
            cand_key[c] = u[k];
            cand_idx[c] = int32_t(j);
          }
        }
      }
    }
    __syncthreads();
    // Passes 1 and 2 over the candidates (all of them match pass 0's digit; their order does not matter).
    for (int pass = 1; pass < 3; ++pass) {
      const int shift = pass == 1 ? 10 : 0;
      const int nbins = pass == 2 ? 1024 : 2048;
      const int above = shift + (pass == 2 ? 10 : 11);
      for (int i = tid; i < nbins; i += kSelThreads) hist[i] = 0;
      __syncthreads();
      for (int base = 0; base < ncand; base += kSelUnroll * kSelThreads) {
        uint32_t u[kSelUnroll];
#pragma unroll
        for (int k = 0; k < kSelUnroll; ++k) {
          const int i = base + k * kSelThreads + tid;
          u[k] = i < ncand ? cand_key[i] : 0u;
        }
#pragma unroll
        for (int k = 0; k < kSelUnroll; ++k) {
          const int i = base + k * kSelThreads + tid;
          const bool match = i < ncand && (u[k] >> above) == (prefix >> above);
          const uint32_t bin = match ? (u[k] >> shift) & uint32_t(nbins - 1) : 0xFFFFFFFFu;
          const unsigned peers = __match_any_sync(0xffffffffu, bin);
          if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
        }
      }
      __syncthreads();
      const SelBin b = sel_find_bin(hist, nbins, kr, warp_sums, &s_bin);
      prefix |= b.bin << shift;
      kr = b.kr;
    }
    // prefix = tau: the candidates above it join the taken map, those equal to it the ties map.
    const uint32_t tau = prefix;
    for (int i = tid; i < ncand; i += kSelThreads) {
      const uint32_t u = cand_key[i];
      const int32_t j = cand_idx[i];
      if (u > tau) atomicOr(&taken[j >> 5], 1u << (j & 31));
      if (u == tau) atomicOr(&ties[j >> 5], 1u << (j & 31));
    }
    __syncthreads();
    // Output in index order, thread t over words [t per, (t + 1) per): slot of a taken key = taken keys before it +
    // min(ties before it, kr); a tie is taken while fewer than kr ties precede it (the old compaction's rule).
    const int nw = int((N + 31) / 32), per = (nw + kSelThreads - 1) / kSelThreads;
    const int w0 = min(tid * per, nw), w1 = min(w0 + per, nw);
    int nt = 0, ne = 0, total = 0;
    for (int w = w0; w < w1; ++w) {
      nt += __popc(taken[w]);
      ne += __popc(ties[w]);
    }
    int t_before = sel_exclusive_scan(nt, warp_sums, &total);
    int e_before = sel_exclusive_scan(ne, warp_sums, &total);
    for (int w = w0; w < w1; ++w) {
      const uint32_t tw = taken[w];
      uint32_t m = tw | ties[w];
      while (m != 0u) {
        const int bit = __ffs(m) - 1;
        m &= m - 1u;
        const int32_t j = int32_t(w) * 32 + bit;
        if ((tw >> bit) & 1u) {
          o[t_before + min(e_before, kr)] = j;
          ++t_before;
        } else {
          if (e_before < kr) o[t_before + e_before] = j;
          ++e_before;
        }
      }
    }
    return;
  }
  // prefix = tau, the k-th largest key: take every larger key and the kr lowest-index keys equal to it, in index
  // order. Slot of a taken j = (#keys > tau before j) + min(#keys == tau before j, kr).
  const uint32_t tau = prefix;
  int gt_run = 0, eq_run = 0;
  for (int64_t base = 0, it = 0; base < N; base += kSelThreads, ++it) {
    const int64_t j = base + tid;
    const uint32_t u = j < N ? (cached ? sel_keys[j] : score_key(sc[j])) : 0u;
    const bool gt = j < N && u > tau, eq = j < N && u == tau;
    const uint32_t bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    const int buf = int(it & 1);
    if (lane == 0) {
      tile_gt[buf][warp] = __popc(bg);
      tile_eq[buf][warp] = __popc(be);
    }
    __syncthreads();
    int gbase = 0, ebase = 0, gtot = 0, etot = 0;
    for (int w = 0; w < kSelWarps; ++w) {
      const int gw = tile_gt[buf][w], ew = tile_eq[buf][w];
      if (w < warp) {
        gbase += gw;
        ebase += ew;
      }
      gtot += gw;
      etot += ew;
    }
    const int gt_before = gt_run + gbase + __popc(bg & lt), eq_before = eq_run + ebase + __popc(be & lt);
    if (gt || (eq && eq_before < kr)) o[gt_before + min(eq_before, kr)] = int32_t(j);
    gt_run += gtot;
    eq_run += etot;
  }
}
}  // namespace

void launch_indexer_scores(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                           const float* q, const float* weights, int64_t max_visible, float* scores, void* stream) {
  const size_t smem = size_t(p.heads * p.dim + kKB * (p.dim + 4)) * sizeof(float);
  // smem follows the model's heads and dim: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h).
  dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_kernel), smem);
  const dim3 grid(unsigned(step.T), unsigned((max_visible + kKB - 1) / kKB));
  dsinfer::cuda::pdl_launch(indexer_scores_kernel, grid, dim3(kKB * kGroups), smem, static_cast<cudaStream_t>(stream),
                            step, view, p, q, weights, max_visible, scores);
}

// The plan (which tensor-core kernel for which step): kTcTok tokens a block sharing each key tile when the step's
// sequences average at least kTcTok tokens (prefill chunks); one token a block otherwise (decode, MTP).
int indexer_tc_tokens_per_block(const StepDevice& step) { return step.T >= kTcTok * step.num_seqs ? kTcTok : 1; }

void launch_indexer_scores_tc(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                              const float* q, const float* weights, int64_t max_visible, float* scores, void* stream,
                              int tokens_per_block) {
  const int tok = (tokens_per_block > 0 ? tokens_per_block : indexer_tc_tokens_per_block(step)) == kTcTok ? kTcTok : 1;
  // Up to 4 tiles a block (q converted once per 512 keys) while that leaves about 4 blocks an SM (decode: fewer).
  const int64_t groups = (step.T + tok - 1) / tok;
  int tiles = kTcMaxTiles;
  auto blocks = [&](int n) { return groups * ((max_visible + kTcKeys * n - 1) / (kTcKeys * n)); };
  while (tiles > 1 && blocks(tiles) < 528) tiles /= 2;
  const dim3 grid(unsigned(groups), unsigned((max_visible + kTcKeys * tiles - 1) / (kTcKeys * tiles)));
  if (tok == kTcTok) {
    dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_tc_tokens_kernel), kTcmSmem);
    dsinfer::cuda::pdl_launch(indexer_scores_tc_tokens_kernel, grid, dim3(kTcmThreads), kTcmSmem,
                              static_cast<cudaStream_t>(stream), step, view, p, q, weights, max_visible, tiles, scores);
    return;
  }
  dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_tc_kernel), kTcSmem);
  dsinfer::cuda::pdl_launch(indexer_scores_tc_kernel, grid, dim3(kTcThreads), kTcSmem, static_cast<cudaStream_t>(stream),
                            step, view, p, q, weights, max_visible, tiles, scores);
}

// The select's plan: the candidate form with kIdxSelCandSlots slots when a row can exceed kIdxSelCandMinKeys keys
// (below it the form's fixed steps cost more than the two scans they save: decode and prefill at context 4,096 were
// 1.6 us and 2 % slower, session 21); DSINFER_INDEXER_SELECT=full takes the full-scan form, =N the candidate form with
// N slots at any length (the A/B of one binary: every form gives the same output). Read once.
int indexer_select_cand_slots(int64_t max_visible) {
  static const int env = [] {
    const char* v = std::getenv("DSINFER_INDEXER_SELECT");
    if (!v) return -1;
    if (std::strcmp(v, "full") == 0) return 0;
    const long n = std::strtol(v, nullptr, 10);
    return n > 0 && n <= kIdxSelCandMaxSlots ? int(n) : -1;
  }();
  if (env >= 0) return env;
  return max_visible > kIdxSelCandMinKeys ? kIdxSelCandSlots : 0;
}

namespace {
// Dynamic shared memory a select block may take while kSelBlocksPerSm blocks fit an SM (the key cache alone stays
// within it up to kIdxSelCacheKeys; the plan's candidate lists take what is left, then the cache's own room).
constexpr int kSelBlocksPerSm = 3;
size_t select_smem_budget() {
  static const size_t budget = [] {
    int dev = 0, per_sm = 0, reserved = 0;
    cudaFuncAttributes fa{};
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(indexer_select_kernel)) != cudaSuccess)
      return size_t(0);
    const long b = long(per_sm) / kSelBlocksPerSm - reserved - long(fa.sharedSizeBytes);
    return b > 0 ? size_t(b) : size_t(0);
  }();
  return budget;
}
}  // namespace

void launch_indexer_select(const StepDevice& step, const IndexerCudaParams& p, const float* scores, int64_t max_visible,
                           int32_t* out, void* stream, int cand_slots) {
  const int64_t cache_keys = max_visible < kIdxSelCacheKeys ? max_visible : kIdxSelCacheKeys;
  const bool plan = cand_slots < 0;
  if (plan) cand_slots = indexer_select_cand_slots(max_visible);
  if (cand_slots > kIdxSelCandMaxSlots) cand_slots = 0;
  size_t smem = size_t(cache_keys) * sizeof(uint32_t);
  if (cand_slots > 0) {
    // The plan: the lists within the blocks-an-SM budget (rows longer than the cache still have the cache's room);
    // an explicit slot count (the bench, the tests): its full size.
    const int64_t round = int64_t(kSelUnroll) * kSelThreads;
    const size_t maps = size_t((max_visible + round - 1) / round * (round / 32)) * 2 * sizeof(uint32_t);
    const size_t want = smem + size_t(cand_slots) * 8 + maps;
    smem = plan ? std::max(smem, std::min(want, select_smem_budget())) : want;
  }
  // smem follows max_visible: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h).
  dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_select_kernel), smem);
  dsinfer::cuda::pdl_launch(indexer_select_kernel, dim3(unsigned(step.T)), dim3(kSelThreads), smem,
                            static_cast<cudaStream_t>(stream), step, p, scores, max_visible, cache_keys,
                            int64_t(smem / sizeof(uint32_t)), cand_slots, out);
}

}  // namespace dsinfer::ops::cuda::detail
