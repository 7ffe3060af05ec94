// CUDA Lightning Indexer scores kernels (see indexer_cuda.h); the top-k select is indexer_select.cu.
// Over 700 lines: the three tensor-core scores kernels share their key-tile loaders, conversions and epilogue
// helpers (one anonymous namespace), and the wgmma kernel's instruction wrappers are spelled out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "core/env_switch.h"
#include "cuda/func_smem.h"
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "cuda/sm90_async.cuh"
#include "cuda/sm90_wgmma_rs.cuh"
#include "ops/indexer/indexer_device.cuh"
#include "ops/indexer/indexer_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
constexpr int kKB = kIdxKeysPerBlock;
constexpr int kGroups = 4;                          // head groups per block (256 threads = 64 keys x 4)
constexpr int kMaxHpg = kIdxMaxHeads / kGroups;     // heads per group


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
  const int64_t t = blockIdx.x, pos = st.pos[t], N = idx_visible(pos, p.m, max_visible);
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
  const int64_t t = blockIdx.x, N = idx_visible(st.pos[t], p.m, max_visible);
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

// One step of a transposing lane butterfly: keep the half of `in` named by `hi`, send the other half to the lane xor
// `mask`, and add what that lane sends: out[k] = kept[k] + partner's sent[k] (the partner keeps what this lane sends).
template <int kHalf>
__device__ __forceinline__ void fold_half(const float (&in)[2 * kHalf], float (&out)[kHalf], bool hi, int mask) {
#pragma unroll
  for (int k = 0; k < kHalf; ++k) {
    const float keep = hi ? in[k + kHalf] : in[k], send = hi ? in[k] : in[k + kHalf];
    out[k] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
  }
}

// The visible-entry count and the sequence of each of a block's tokens t0 .. t0 + tn - 1 (0 and -1 past tn), for the
// kernels that take several tokens a block; returns the largest count.
template <int kTok>
__device__ __forceinline__ int64_t block_tokens(const StepDevice& st, int64_t m, int64_t max_visible, int64_t t0, int tn,
                                                int64_t (&n_of)[kTok], int32_t (&seq_of)[kTok]) {
  int64_t nmax = 0;
#pragma unroll
  for (int s = 0; s < kTok; ++s) {
    n_of[s] = s < tn ? idx_visible(st.pos[t0 + s], m, max_visible) : 0;
    seq_of[s] = s < tn ? st.seq_of_token[t0 + s] : -1;
    nmax = n_of[s] > nmax ? n_of[s] : nmax;
  }
  return nmax;
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
  const int64_t nmax = block_tokens(st, p.m, max_visible, t0, tn, n_of, seq_of);
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
          fold_half(part, h4, b0, 4);
          fold_half(h4, h2, b1, 8);
          const float keep = b2 ? h2[1] : h2[0], send = b2 ? h2[0] : h2[1];
          const float total = keep + __shfl_xor_sync(0xffffffffu, send, 16);
          if (j0 + nkey < n_of[s]) scores[(t0 + s) * max_visible + j0 + nkey] = total * kscale[nkey] * rs;
        }
      }
    }
    r0 = r1;
  }
}


// ---- Scores on wgmma (fast mode, prefill; the plan: indexer_tc_tokens_per_block): kWgTok consecutive tokens a
// block, their q (split hi) resident in shared memory for all the block's key tiles, and 128-key tiles through two
// buffers (the next tile's codes loaded into registers while this one is multiplied; a tile's chains end, a block
// barrier, then the next tile is stored and a second barrier). Two warpgroups take the block's tokens in turn
// (warpgroup g: token slots g, g + 2, g + 4, g + 6); a token's 64 (padded) heads x 128 keys are one chain of eight
// m64n128k16 wgmma (A = the token's q, B = the tile, both bf16 in shared memory as 8 x 8 core matrices), the next
// slot's chain in flight while this one's epilogue (ReLU x w over heads, the key scale) runs. Products are exact
// as in the mma.sync kernels; the per-(token, key) sum order is wgmma's k16 chain, then per lane its heads g and g
// + 8, a lane tree over g (xor 4, 8, 16) and the four warps in order: the same for every key, token and step (so a
// token's scores do not depend on the chunk), but not the mma.sync kernels' bits (fast mode only; decode keeps the
// one-token kernel). Queries that are not bf16-exact (hf numerics) add their mid and lo splits as register-A wgmma
// from q in global memory, one token at a time.
constexpr int kWgTok = kIdxWgTokens;
constexpr int kWgThreads = 256;
constexpr int kWgQBytes = kTcHeads * kTcDim * 2;  // 16 KB: a token's q split, core matrices (dim group, head group)
constexpr int kWgKBytes = kTcKeys * kTcDim * 2;   // 32 KB: a key tile, core matrices (dim group, key group)
constexpr size_t kWgSmem = size_t(kWgTok) * kWgQBytes + 2 * size_t(kWgKBytes) + 2 * kTcKeys * 4 +
                           kWgTok * kTcHeads * 4 + 2 * 2 * 4 * kTcKeys * 4;  // 207,872 B

using dsinfer::cuda::sm90::wgmma_desc;        // the operands' shared-memory descriptors (no swizzle)
using dsinfer::cuda::sm90::wgmma_fence_regs;  // the accumulators kept in place around asynchronous wgmma
using dsinfer::cuda::sm90::wgmma_rs;          // the m64nNk16 bf16 wgmma with A from registers (sm90_wgmma_rs.cuh)

// d (64 heads x 128 keys, fp32) (+)= A (64 x 16 at descriptor da) B (128 x 16 at db)^T, both K-major in shared
// memory; accumulate 0: d = A B^T.
__device__ __forceinline__ void wg_m64n128k16_ss(float (&d)[16][4], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
        "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(da), "l"(db), "r"(accumulate));
}

// Byte offset of element (row, dim) in a 64- or 128-row core-matrix tile (rows = heads or keys, `groups` row groups).
__device__ __forceinline__ uint32_t cm_off(int row, int dim, int groups) {
  return uint32_t((((dim >> 3) * groups + (row >> 3)) * 8 + (row & 7)) * 16 + (dim & 7) * 2);
}

// A key tile from registers (KeyTileRegs<kWgThreads>) into a core-matrix buffer: 16 codes -> dims 16c .. 16c + 15.
__device__ __forceinline__ void store_key_tile_cm(const KeyTileRegs<kWgThreads>& k, unsigned char* kb, float* kscale,
                                                  int tid) {
  using R = KeyTileRegs<kWgThreads>;
#pragma unroll
  for (int it = 0; it < R::kLoads; ++it) {
    const uint4 c = k.codes[it];
    const int key = tid / 8 + R::kRowStep * it, d0 = 16 * (tid % 8);
    *reinterpret_cast<uint4*>(kb + cm_off(key, d0, kTcKeys / 8)) =
        make_uint4(e4m3x2_to_bf16x2(c.x), e4m3x2_to_bf16x2(c.x >> 16), e4m3x2_to_bf16x2(c.y),
                   e4m3x2_to_bf16x2(c.y >> 16));
    *reinterpret_cast<uint4*>(kb + cm_off(key, d0 + 8, kTcKeys / 8)) =
        make_uint4(e4m3x2_to_bf16x2(c.z), e4m3x2_to_bf16x2(c.z >> 16), e4m3x2_to_bf16x2(c.w),
                   e4m3x2_to_bf16x2(c.w >> 16));
  }
  if (tid < kTcKeys) kscale[tid] = k.scale;
}

// The bf16 split `split` (1 = mid, 2 = lo) of q as this lane's A fragments (heads 16 wq + g and + 8; zero rows past
// `heads`), from q in global memory.
__device__ __forceinline__ void wg_q_split_regs(uint32_t (&a)[8][4], const float* qt, int heads, int split, int wq,
                                                int g, int q4) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int h = 16 * wq + g + 8 * (r & 1), d = 16 * kk + 2 * q4 + 8 * (r >> 1);
      float2 x = make_float2(0.0f, 0.0f);
      if (h < heads) x = *reinterpret_cast<const float2*>(qt + h * kTcDim + d);
      const float v[2] = {x.x, x.y};
      __nv_bfloat16 part[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const __nv_bfloat16 hi = __float2bfloat16_rn(v[e]);
        const float r1 = v[e] - __bfloat162float(hi);
        const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
        part[e] = split == 1 ? mid : __float2bfloat16_rn(r1 - __bfloat162float(mid));
      }
      a[kk][r] = uint32_t(__bfloat16_as_ushort(part[0])) | (uint32_t(__bfloat16_as_ushort(part[1])) << 16);
    }
}

// Issues one token's chain (split hi from shared memory) against a key tile: d = q K^T over the 128 dims.
__device__ __forceinline__ void wg_issue_hi(float (&d)[16][4], uint32_t qa, uint32_t kb) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    wg_m64n128k16_ss(d, wgmma_desc(qa + kk * 2048u, 1024u, 128u), wgmma_desc(kb + kk * 4096u, 2048u, 128u),
                     kk > 0 ? 1 : 0);
}

// The epilogue of one token and tile: the lane's heads g, g + 8 ReLU'd and weighted per key, a transposing lane tree
// over g (each lane ends with 4 keys), the warps' sums through `red` (this warpgroup's, double-buffered) in warp order.
__device__ __forceinline__ void wg_epilogue(const float (&d)[16][4], const float* wt, float* red, int& buf,
                                            const float* kscale, int64_t j0, int64_t n, float* out, float rs, int wq,
                                            int lane, int wtid, int bar) {
  const int g = lane >> 2, q4 = lane & 3;
  const float w0 = wt[16 * wq + g], w1 = wt[16 * wq + g + 8];
  float part[32];
#pragma unroll
  for (int nt = 0; nt < 16; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = w0 * fmaxf(d[nt][e], 0.0f);
      x += w1 * fmaxf(d[nt][2 + e], 0.0f);
      part[2 * nt + e] = x;
    }
  const bool b0 = (g & 1) != 0, b1 = (g & 2) != 0, b2 = (g & 4) != 0;
  float h16[16], h8[8], h4[4];
  fold_half(part, h16, b0, 4);
  fold_half(h16, h8, b1, 8);
  fold_half(h8, h4, b2, 16);
  // The lane holds i = 16 b0 + 8 b1 + 4 b2 + m of (nt, e) = (i / 2, i % 2): keys kb + {0, 1, 8, 9}.
  float* r = red + buf * 4 * kTcKeys;
  const int kb = 8 * (8 * int(b0) + 4 * int(b1) + 2 * int(b2)) + 2 * q4;
  *reinterpret_cast<float2*>(r + wq * kTcKeys + kb) = make_float2(h4[0], h4[1]);
  *reinterpret_cast<float2*>(r + wq * kTcKeys + kb + 8) = make_float2(h4[2], h4[3]);
  dsinfer::cuda::sm90::named_sync(bar, 128);
  const float total = ((r[wtid] + r[kTcKeys + wtid]) + r[2 * kTcKeys + wtid]) + r[3 * kTcKeys + wtid];
  if (j0 + wtid < n) out[j0 + wtid] = total * kscale[wtid] * rs;
  buf ^= 1;
}

// The block's q split hi (tokens t0 .. t0 + tn - 1, zeros past them and past `heads`) into qs as core matrices
// (head-fastest threads: conflict-free 8-byte stores) and their head weights into ws; returns whether any of this
// thread's q values is not bf16-exact.
__device__ __forceinline__ bool wg_stage_q(unsigned char* qs, float* ws, const float* q, const float* weights,
                                           int64_t t0, int tn, int heads, int tid) {
  bool inexact = false;
  for (int i = tid; i < kWgTok * kTcHeads * (kTcDim / 4); i += kWgThreads) {
    const int h = i % kTcHeads, c = (i / kTcHeads) % (kTcDim / 4), s = i / (kTcHeads * (kTcDim / 4));
    float4 x4 = make_float4(0.f, 0.f, 0.f, 0.f);
    if (s < tn && h < heads) x4 = reinterpret_cast<const float4*>(q + ((t0 + s) * heads + h) * kTcDim)[c];
    const float x[4] = {x4.x, x4.y, x4.z, x4.w};
    __nv_bfloat16 hi[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      hi[e] = __float2bfloat16_rn(x[e]);
      inexact = inexact || x[e] != __bfloat162float(hi[e]);
    }
    *reinterpret_cast<uint2*>(qs + s * kWgQBytes + cm_off(h, 4 * c, kTcHeads / 8)) = pack4_bf16(hi);
  }
  for (int i = tid; i < kWgTok * kTcHeads; i += kWgThreads) {
    const int s = i / kTcHeads, h = i % kTcHeads;
    ws[i] = s < tn && h < heads ? weights[(t0 + s) * heads + h] : 0.0f;
  }
  return inexact;
}

__global__ void __launch_bounds__(kWgThreads, 1)
    indexer_scores_wgmma_kernel(StepDevice st, LayerStateView v, IndexerCudaParams p, const float* q,
                                const float* weights, int64_t max_visible, int tiles, float* scores) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ __align__(128) unsigned char wg_smem[];
  unsigned char* qs = wg_smem;                          // [token] 16 KB
  unsigned char* kbuf = qs + kWgTok * kWgQBytes;        // [2] 32 KB
  float* kscale = reinterpret_cast<float*>(kbuf + 2 * kWgKBytes);  // [2][128]
  float* ws = kscale + 2 * kTcKeys;                     // [token][64]
  float* redall = ws + kWgTok * kTcHeads;               // [warpgroup][2][4][128]
  const int64_t t0 = int64_t(blockIdx.x) * kWgTok;
  const int tn = int(st.T - t0 < kWgTok ? st.T - t0 : kWgTok);
  int64_t n_of[kWgTok];
  int32_t seq_of[kWgTok];
  const int64_t nmax = block_tokens(st, p.m, max_visible, t0, tn, n_of, seq_of);
  const int64_t jb = int64_t(blockIdx.y) * kTcKeys * tiles;
  if (jb >= nmax) return;  // block-uniform
  const int heads = int(p.heads), tid = int(threadIdx.x);
  const bool inexact = wg_stage_q(qs, ws, q, weights, t0, tn, heads, tid);
  dsinfer::cuda::sm90::fence_proxy_async();
  const bool split3 = __syncthreads_or(inexact) != 0;
  const int wgi = tid >> 7, wtid = tid & 127, wq = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, q4 = lane & 3;
  float* red = redall + wgi * 2 * 4 * kTcKeys;
  int buf = 0;
  const float rs = rsqrtf(float(kTcDim));
  const uint32_t qs_a = dsinfer::cuda::sm90::smem_u32(qs), kb_a = dsinfer::cuda::sm90::smem_u32(kbuf);
  int ntile = 0;  // tiles stored so far (the buffer parity)
  for (int r0 = 0; r0 < tn;) {  // a run of tokens of one sequence: they share the key tiles
    int r1 = r0 + 1;
    while (r1 < tn && seq_of[r1] == seq_of[r0]) ++r1;
    int64_t nrun = 0;
    for (int s = r0; s < r1; ++s) nrun = n_of[s] > nrun ? n_of[s] : nrun;
    const int32_t* table = st.block_tables + int64_t(seq_of[r0]) * st.table_stride;
    if (jb < nrun) {  // block-uniform
      KeyTileRegs<kWgThreads> next;
      load_key_tile<kWgThreads>(next, v, table, jb, nrun, tid);
      for (int tile = 0; tile < tiles; ++tile, ++ntile) {
        const int64_t j0 = jb + int64_t(tile) * kTcKeys;
        if (j0 >= nrun) break;  // block-uniform
        const int kbi = ntile & 1;
        __syncthreads();  // the tile before the previous one (this buffer) is read
        store_key_tile_cm(next, kbuf + kbi * kWgKBytes, kscale + kbi * kTcKeys, tid);
        dsinfer::cuda::sm90::fence_proxy_async();
        __syncthreads();
        if (tile + 1 < tiles && j0 + kTcKeys < nrun)
          load_key_tile<kWgThreads>(next, v, table, j0 + kTcKeys, nrun, tid);  // in flight
        const uint32_t kb = kb_a + uint32_t(kbi * kWgKBytes);
        const float* ksc = kscale + kbi * kTcKeys;
        // This warpgroup's token slots wgi, wgi + 2, wgi + 4, wgi + 6, each multiplied whether or not it is a token
        // of this run that sees keys of this tile (straight-line code: wgmma under a branch the compiler cannot see
        // is warpgroup-uniform is serialised); the epilogue stores only those that are.
        float* const out0 = scores + t0 * max_visible;
        auto epi = [&](const float(&d)[16][4], int s) {
          const bool mine = s >= r0 && s < r1 && j0 < n_of[s];
          wg_epilogue(d, ws + s * kTcHeads, red, buf, ksc, j0, mine ? n_of[s] : 0, out0 + s * max_visible, rs, wq,
                      lane, wtid, 1 + wgi);
        };
        if (!split3) {
          float da[16][4], db[16][4];
          using namespace dsinfer::cuda::sm90;
          wgmma_fence_regs(da);
          wgmma_fence();
          wg_issue_hi(da, qs_a + uint32_t(wgi * kWgQBytes), kb);
          wgmma_commit();
#pragma unroll
          for (int i = 1; i < kWgTok / 2; i += 2) {
            wgmma_fence_regs(db);
            wgmma_fence();
            wg_issue_hi(db, qs_a + uint32_t((wgi + 2 * i) * kWgQBytes), kb);
            wgmma_commit();
            wgmma_wait<1>();
            wgmma_fence_regs(da);
            epi(da, wgi + 2 * (i - 1));
            if (i + 1 < kWgTok / 2) {
              wgmma_fence_regs(da);
              wgmma_fence();
              wg_issue_hi(da, qs_a + uint32_t((wgi + 2 * (i + 1)) * kWgQBytes), kb);
              wgmma_commit();
              wgmma_wait<1>();
            } else {
              wgmma_wait<0>();
            }
            wgmma_fence_regs(db);
            epi(db, wgi + 2 * i);
          }
        } else {
#pragma unroll 1
          for (int i = 0; i < kWgTok / 2; ++i) {
            const int s = wgi + 2 * i;
            const float* qt = q + (t0 + (s < tn ? s : 0)) * heads * kTcDim;
            uint32_t a1[8][4], a2[8][4];
            wg_q_split_regs(a1, qt, heads, 1, wq, g, q4);
            wg_q_split_regs(a2, qt, heads, 2, wq, g, q4);
            float da[16][4];
            float (&da64)[64] = reinterpret_cast<float (&)[64]>(da);  // the same registers, as wgmma_rs takes them
            wgmma_fence_regs(da);
            dsinfer::cuda::sm90::wgmma_fence();
            wg_issue_hi(da, qs_a + uint32_t(s * kWgQBytes), kb);
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) wgmma_rs<128>(da64, a1[kk], wgmma_desc(kb + kk * 4096u, 2048u, 128u), 1);
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) wgmma_rs<128>(da64, a2[kk], wgmma_desc(kb + kk * 4096u, 2048u, 128u), 1);
            dsinfer::cuda::sm90::wgmma_commit();
            dsinfer::cuda::sm90::wgmma_wait<0>();
            wgmma_fence_regs(da);
            epi(da, s);
          }
        }
      }
    }
    r0 = r1;
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

// The plan (which tensor-core kernel for which step): in fast mode (p.fast) the wgmma kernel (kWgTok tokens a block)
// on steps whose sequences average at least kWgTok tokens (prefill chunks) and that see more than kWgMinVisible keys;
// else kTcTok tokens a block sharing each key tile when they average at least kTcTok; one token a block otherwise
// (decode, MTP). The wgmma kernel is the default since session 26 (H200, V4-Flash 4 layers, 32K prefill in 8K chunks:
// indexer 12.88 -> 10.75 ms; the fidelity gate and check-reference pass with it: bench/NOTES.md); on few keys it
// loses (s23-indexer, dsinfer_indexer_bench: a 4,096-token prompt, <= 1,024 keys, 0.219 -> 0.276 ms; a 32K prompt's
// first 8K chunk, <= 2,048 keys, 0.749 -> 0.778; its last, 6-8K keys, 4.59 -> 3.51: blocks of 8 tokens over few keys
// spend their time staging q and filling the pipeline; the model's indexer_topk at 4,096 tokens 0.31 -> 0.36 ms in
// session 26), so steps whose longest key list is at most kIdxWgMinVisible keep the four-token kernel (session 27).
// DSINFER_INDEXER_SCORES (the A/B switches): `mma` the mma.sync kernels everywhere, `wgmma` the wgmma kernel on every
// prefill step whatever its keys (session 26's plan). Read once; another value is named and ignored.
int indexer_tc_tokens_per_block(const StepDevice& step, const IndexerCudaParams& p, int64_t max_visible) {
  static const int64_t min_visible = [] {  // -1: never the wgmma kernel
    const std::string v = env_switch("DSINFER_INDEXER_SCORES", {"mma", "wgmma"});
    return v == "mma" ? int64_t(-1) : v == "wgmma" ? int64_t(0) : kIdxWgMinVisible;
  }();
  if (min_visible >= 0 && p.fast && step.T >= kWgTok * step.num_seqs && max_visible > min_visible) return kWgTok;
  return step.T >= kTcTok * step.num_seqs ? kTcTok : 1;
}

void launch_indexer_scores_tc(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                              const float* q, const float* weights, int64_t max_visible, float* scores, void* stream,
                              int tokens_per_block) {
  const int want = tokens_per_block > 0 ? tokens_per_block : indexer_tc_tokens_per_block(step, p, max_visible);
  if (want == kWgTok) {
    // One block per kWgTok tokens over all their keys (q staged once) unless that leaves under 2 blocks an SM
    // (about): then the keys are split into ranges of whole tiles.
    const int64_t groups = (step.T + kWgTok - 1) / kWgTok;
    int64_t tiles = (max_visible + kTcKeys - 1) / kTcKeys;
    auto ranges = [&](int64_t n) { return (max_visible + kTcKeys * n - 1) / (kTcKeys * n); };
    while (tiles > 1 && groups * ranges(tiles) < 264) tiles = (tiles + 1) / 2;
    const dim3 grid(unsigned(groups), unsigned(ranges(tiles)));
    dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_wgmma_kernel), kWgSmem);
    dsinfer::cuda::pdl_launch(indexer_scores_wgmma_kernel, grid, dim3(kWgThreads), kWgSmem,
                              static_cast<cudaStream_t>(stream), step, view, p, q, weights, max_visible, int(tiles),
                              scores);
    return;
  }
  const int tok = want == kTcTok ? kTcTok : 1;
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

}  // namespace dsinfer::ops::cuda::detail
