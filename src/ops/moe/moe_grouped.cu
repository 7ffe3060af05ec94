// Grouped (prefill) MoE GEMMs for FP4_G32 experts with E8M0 scales (layout and k order in moe_grouped_common.h,
// design in docs/kernels.md "MoE grouped path"). CTA tile: 128 permuted rows of one expert x 128 weight rows, taken
// from a device-built tile list (expert, first row) so no CTA is launched per empty expert; grid x = column tile
// (fastest, so the CTAs sharing an A tile and an expert's weights run together and hit L2). Per 128-k stage the
// CTA cp.asyncs the A rows (gate/up: x rows gathered through perm_token) into a swizzled bf16 tile and the raw FP4
// bytes + scale bytes of its weight rows (3-stage ring); each warp (64 x 32) ldmatrixes A and decodes its B
// fragments in registers (exact: e2m1 x 2^e is a bf16). fp32 accumulators; one thread owns each output, summed in a
// fixed k order: deterministic, and a row's result does not depend on the other rows. Gate/up: W1 and W3 rows of
// the same 64 columns in one CTA, epilogue h = silu(min(g, L)) * clamp(u, -L, L) -> bf16 chunk layout (the down
// kernel's A). Down: W2, epilogue = fp32 rows of yp.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/sm90_async.cuh"
#include "ops/moe/moe_fast_common.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

namespace md = ::dsinfer::ops::moe_detail;
using ::dsinfer::cuda::sm90::cp_async16;
using ::dsinfer::cuda::sm90::cp_async_commit;
using ::dsinfer::cuda::sm90::cp_async_wait;
using ::dsinfer::cuda::sm90::smem_u32;
constexpr int BM = md::kGrpBM, BN = md::kGrpBN, BK = md::kGrpBK, kStages = md::kGrpStages, NT = md::kGrpThreads;
constexpr int kAStage = BM * BK * 2;   // bf16 A tile, 256-byte rows, 16-byte pieces swizzled by row & 7
constexpr int kBStage = BN * BK / 2;   // raw FP4 rows, 64 bytes each
constexpr int kSStage = BN * BK / 32;  // scale bytes, 4 per row
constexpr int kStage = kAStage + kBStage + kSStage;
constexpr int kSmem = kStages * kStage;
static_assert(BM == 128 && BN == 128 && BK == 128 && NT == 256, "the loaders below assume these sizes");
static_assert(md::kFastScaleShift == 64, "the epilogues multiply by 2^64");

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// bf16x2 multiply (exact here: a power-of-two factor, results in the normal range; see moe_fast_common.h).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a), y = *reinterpret_cast<__nv_bfloat162*>(&b);
  __nv_bfloat162 r = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t word(const uint4& v, int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; }

// Shared-memory weight row (0..127) of the B fragment rows of warp column wn, n-tile j, lane row g. Gate/up: rows
// 0..63 are W1, 64..127 the same columns of W3; warp wn takes h columns 16wn..16wn+15 (n-tiles 0, 1 of W1, 2, 3 of
// W3), so g and u of one output meet in one thread. Down: warp wn takes rows 32wn..32wn+31.
template <bool kGateUp>
__device__ __forceinline__ int b_row(int wn, int j, int g) {
  return kGateUp ? (j >> 1) * 64 + 16 * wn + 8 * (j & 1) + g : 32 * wn + 8 * j + g;
}

// One 128-k stage of the warp's 64 x 32 tile: 8 k-steps x (4 m16 tiles x 4 n8 tiles); m16 tiles at or past mlim
// (all rows past the expert's) are skipped (warp-uniform): a 96-row tile costs the tensor cores of its
// sub-partitions (warps w and w + 4 share one) 6 of 8 m16 tiles.
template <bool kGateUp>
__device__ __forceinline__ void compute_stage(const uint8_t* base, int wm, int wn, int lane, int mlim,
                                              float (&acc)[4][4][4]) {
  const int g = lane >> 2, t = lane & 3;
  const uint32_t a_s = smem_u32(base);
  const uint8_t* bq = base + kAStage;
  const uint8_t* sq = bq + kBStage;
  uint4 wv[4];
  uint32_t F[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int br = b_row<kGateUp>(wn, j, g);
    wv[j] = *reinterpret_cast<const uint4*>(bq + br * 64 + t * 16);
    const uint32_t f = md::fp4_scale_bf16(sq[br * 4 + t]);
    F[j] = f | (f << 16);
  }
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    uint32_t af[4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      if (mi >= mlim) break;
      const int r = wm * 64 + mi * 16 + (lane & 15), piece = 2 * s + (lane >> 4);
      ldmatrix_x4(af[mi], a_s + uint32_t(r * 256 + ((piece ^ (r & 7)) << 4)));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t w = word(wv[j], s >> 1);
      const int pp = 2 * (s & 1);
      const uint32_t b0 = bf16x2_mul(md::fp4_pair_bits(w, pp), F[j]);
      const uint32_t b1 = bf16x2_mul(md::fp4_pair_bits(w, pp + 1), F[j]);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        if (mi < mlim) mma_bf16(acc[mi][j], af[mi], b0, b1);
    }
  }
}

// Global sources of one thread's cp.async pieces for one tile.
struct TileSrc {
  const uint16_t* arow[8];  // A rows (tid >> 4) + 16i, piece tid & 15 (a valid dummy row past the expert's rows)
  bool avalid[8];
  const uint8_t* brow[2];   // B rows (tid >> 2) + 64i, piece tid & 3
  const uint8_t* srow;      // scale row tid (tid < 128)
};

template <bool kGateUp>
__device__ __forceinline__ void tile_sources(const MoeGroupedArgs& p, int e, int rb, int rows, TileSrc& src) {
  const int tid = threadIdx.x;
  const int64_t K = p.K;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = (tid >> 4) + 16 * i;
    src.avalid[i] = r < rows;
    const int64_t arow = !src.avalid[i] ? 0 : kGateUp ? int64_t(p.perm_token[rb + r]) : int64_t(rb) + r;
    src.arow[i] = p.a + arow * K;
  }
  // weight row of shared row br: gate/up: W1 (br < 64) or W3 column n0 + br % 64; down: W2 row n0 + br
  const int64_t n0 = int64_t(blockIdx.x) * (kGateUp ? md::kGrpHCols : BN);
  auto wrow = [&](int br, bool scale) -> const uint8_t* {
    const bool up = kGateUp && br >= 64;
    const int64_t n = n0 + (kGateUp ? (br & 63) : br);
    const void* base = scale ? (up ? p.s3[e] : p.s1[e]) : (up ? p.w3[e] : p.w1[e]);
    return static_cast<const uint8_t*>(base) + n * (scale ? K / 32 : K / 2);
  };
#pragma unroll
  for (int i = 0; i < 2; ++i) src.brow[i] = wrow((tid >> 2) + 64 * i, false) + (tid & 3) * 16;
  src.srow = tid < BN ? wrow(tid, true) : nullptr;
}

__device__ __forceinline__ void load_stage(const TileSrc& src, int kt, uint8_t* base) {
  const int tid = threadIdx.x, piece = tid & 15;
  const uint32_t a_s = smem_u32(base), b_s = a_s + kAStage, s_s = b_s + kBStage;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = (tid >> 4) + 16 * i;
    cp_async16(a_s + uint32_t(r * 256 + ((piece ^ (r & 7)) << 4)), src.arow[i] + int64_t(kt) * BK + piece * 8,
               src.avalid[i]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int br = (tid >> 2) + 64 * i;
    cp_async16(b_s + uint32_t(br * 64 + (tid & 3) * 16), src.brow[i] + int64_t(kt) * (BK / 2), true);
  }
  if (tid < BN) cp_async4(s_s + uint32_t(tid * 4), src.srow + int64_t(kt) * (BK / 32));
}

template <bool kGateUp>
__device__ __forceinline__ void epilogue(const MoeGroupedArgs& p, int rb, int rows, int wm, int wn, int lane,
                                         float (&acc)[4][4][4]) {
  const int g = lane >> 2, t = lane & 3;
  constexpr float kScale = 0x1p64f;  // 2^kFastScaleShift: the decoded weights were scaled by 2^-64
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = wm * 64 + mi * 16 + g + 8 * half;
      if (row >= rows) continue;
      const int64_t grow = int64_t(rb) + row;
      if constexpr (kGateUp) {
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float gv = acc[mi][jj][2 * half + h] * kScale, uv = acc[mi][jj + 2][2 * half + h] * kScale;
            if (p.limit > 0.0f) {
              gv = fminf(gv, p.limit);
              uv = fminf(fmaxf(uv, -p.limit), p.limit);
            }
            const float hv = gv / (1.0f + expf(-gv)) * uv;
            const int64_t col = int64_t(blockIdx.x) * md::kGrpHCols + 16 * wn + 8 * jj + 2 * t + h;
            p.hout[grow * p.N + (col & ~int64_t(127)) + md::grp_slot(int(col & 127))] =
                __bfloat16_as_ushort(__float2bfloat16_rn(hv));
          }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t col = int64_t(blockIdx.x) * BN + 32 * wn + 8 * j + 2 * t;
          const float y0 = acc[mi][j][2 * half] * kScale, y1 = acc[mi][j][2 * half + 1] * kScale;
          if (p.yout16)
            *reinterpret_cast<uint32_t*>(p.yout16 + grow * p.N + col) =
                uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(y0))) |
                (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(y1))) << 16);
          else
            *reinterpret_cast<float2*>(p.yout + grow * p.N + col) = make_float2(y0, y1);
        }
      }
    }
}

template <bool kGateUp>
__global__ void __launch_bounds__(NT, 1) moe_grouped_kernel(MoeGroupedArgs p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 2, wn = warp & 3;
  const int ntiles = p.tiles[0], nk = int(p.K / BK);
  for (int tile = blockIdx.y; tile < ntiles; tile += gridDim.y) {
    const int e = p.tiles[1 + 2 * tile], m0 = p.tiles[2 + 2 * tile];
    const int rb = p.offsets[e] + m0, rows = min(BM, p.offsets[e + 1] - rb);
    TileSrc src;
    tile_sources<kGateUp>(p, e, rb, rows, src);
    float acc[4][4][4] = {};
    const int mlim = min(4, max(0, (rows - wm * 64 + 15) / 16));  // m16 tiles of this warp holding expert rows
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < nk) load_stage(src, s, smem + s * kStage);
      cp_async_commit();
    }
    for (int kt = 0; kt < nk; ++kt) {
      cp_async_wait<kStages - 2>();  // stage kt has landed (for this thread) ...
      __syncthreads();               // ... for all threads, and stage kt - 1 is free again
      const int nxt = kt + kStages - 1;
      if (nxt < nk) load_stage(src, nxt, smem + (nxt % kStages) * kStage);
      cp_async_commit();
      compute_stage<kGateUp>(smem + (kt % kStages) * kStage, wm, wn, lane, mlim, acc);
    }
    cp_async_wait<0>();
    __syncthreads();  // the next tile's prologue overwrites the ring
    epilogue<kGateUp>(p, rb, rows, wm, wn, lane, acc);
  }
}

// x fp32 -> bf16 (round to nearest even, as the decode path) in chunk layout.
__global__ void moe_grouped_x_kernel(const float* x, int64_t total, uint16_t* xb) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    xb[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[(i & ~int64_t(127)) + md::grp_elem(int(i & 127))]));
}

// One warp: lane i owns a run of consecutive experts; tiles per expert = ceil(rows / BM), exclusive scan by shuffles,
// then each lane writes its experts' (expert, first row) entries in expert order.
__global__ void moe_tile_list_kernel(const int32_t* offsets, int E, int32_t* tiles) {
  const int lane = threadIdx.x, per = (E + 31) / 32;
  const int e0 = min(E, lane * per), e1 = min(E, e0 + per);
  int c = 0;
  for (int e = e0; e < e1; ++e) c += (offsets[e + 1] - offsets[e] + BM - 1) / BM;
  int incl = c;
  for (int d = 1; d < 32; d <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += u;
  }
  int run = incl - c;
  for (int e = e0; e < e1; ++e) {
    const int cnt = offsets[e + 1] - offsets[e];
    for (int m = 0; m < cnt; m += BM, ++run) tiles[1 + 2 * run] = e, tiles[2 + 2 * run] = m;
  }
  if (lane == 31) tiles[0] = incl;
}

// The same tiles ordered by size class, largest first: class k (0..7) holds the tiles whose rows rounded up to 16 are
// BM - 16 k (the RS kernels' wgmma N), within a class expert order then row order. A persistent grid striding over
// the list then meets items of about the same cost in each round and the smallest in the last, so the CTAs finish
// closer together. One warp, as moe_tile_list_kernel: lane l counts its experts' tiles per class, a warp scan per
// class places them.
constexpr int kSizeClasses = BM / 16;
__device__ __forceinline__ int size_class(int rows) { return kSizeClasses - (rows + 15) / 16; }
__global__ void moe_tile_list_by_size_kernel(const int32_t* offsets, int E, int32_t* tiles) {
  const int lane = int(threadIdx.x), per = (E + 31) / 32;
  const int e0 = min(E, lane * per), e1 = min(E, e0 + per);
  int run[kSizeClasses];
#pragma unroll
  for (int k = 0; k < kSizeClasses; ++k) run[k] = 0;
  for (int e = e0; e < e1; ++e) {
    const int cnt = offsets[e + 1] - offsets[e];
    const int r = cnt % BM, k = size_class(r);
    run[0] += cnt / BM;
#pragma unroll
    for (int j = 0; j < kSizeClasses; ++j) run[j] += r > 0 && k == j ? 1 : 0;
  }
  // run[k] <- the lane's first position in class k: the classes before k, then the lower lanes' tiles of class k
  int base = 0;
#pragma unroll
  for (int k = 0; k < kSizeClasses; ++k) {
    int incl = run[k];
    for (int d = 1; d < 32; d <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += u;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    run[k] = base + incl - run[k];
    base += total;
  }
  for (int e = e0; e < e1; ++e) {
    const int cnt = offsets[e + 1] - offsets[e];
    for (int m = 0; m < cnt; m += BM) {
      const int k = size_class(min(BM, cnt - m));
#pragma unroll
      for (int j = 0; j < kSizeClasses; ++j)
        if (k == j) {
          tiles[1 + 2 * run[j]] = e;
          tiles[2 + 2 * run[j]] = m;
          ++run[j];
        }
    }
  }
  if (lane == 31) tiles[0] = base;
}

}  // namespace

void launch_moe_grouped_x(const float* x, int64_t T, int64_t K, uint16_t* xb, void* stream) {
  const int64_t total = T * K;
  const unsigned blocks = unsigned(std::clamp<int64_t>((total + 255) / 256, 1, 132 * 16));
  moe_grouped_x_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, total, xb);
}

void launch_moe_tile_list(const int32_t* offsets, int64_t experts, int32_t* tiles, void* stream, bool by_size) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (by_size) moe_tile_list_by_size_kernel<<<1, 32, 0, st>>>(offsets, int(experts), tiles);
  else moe_tile_list_kernel<<<1, 32, 0, st>>>(offsets, int(experts), tiles);
}

void launch_moe_grouped(bool gate_up, const MoeGroupedArgs& a, int64_t max_tiles, void* stream) {
  // Above 48 KB of dynamic shared memory needs the opt-in (per device, so on every launch, as the other kernels).
  if (gate_up) cudaFuncSetAttribute(moe_grouped_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  else cudaFuncSetAttribute(moe_grouped_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int64_t cols = gate_up ? md::kGrpHCols : BN;
  const dim3 grid(unsigned(a.N / cols), unsigned(std::clamp<int64_t>(max_tiles, 1, 65535)));
  if (gate_up) moe_grouped_kernel<true><<<grid, NT, kSmem, static_cast<cudaStream_t>(stream)>>>(a);
  else moe_grouped_kernel<false><<<grid, NT, kSmem, static_cast<cudaStream_t>(stream)>>>(a);
}

}  // namespace dsinfer::ops::cuda::detail
