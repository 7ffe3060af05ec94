// The mixing reduction of hc_pre / hc_head (see mhc.cu for the finalize): mu[t, r] = fn[r] . x[t] for all tokens
// and mixes, plus sum(x[t]^2), on the fp64 tensor cores (mma.m8n8k4.f64: fp32 inputs are exact in double, each
// product exact, accumulation in double as in the reference). Block (tile, split) of 8 warps: a tile of 8 * MT
// tokens (A, m-tiles) against the 8 * NT fn rows (B, n-tiles) over the chunks of its split; each chunk of kHcChunk
// floats is staged with a kStages-deep cp.async pipeline (3 where two blocks per SM still fit, else 2), and warp w
// takes the chunk's k-slice [16w, 16w + 16). The 8 warps' sums are then added in warp order and written once per
// (token, split, mix) into the token's own output row y[t] (viewed as doubles [splits, mixes + 1]); nothing is
// added atomically, so results are deterministic.
// A token's sums follow the same k order whatever MT is (mma rows are independent), so the tile may follow T in
// batch-invariant mode. The 32-token tile issues its m-tiles in pairs on sm_90's m16n8k4 shape (HcSplit::mma16),
// the 8-token tile on m8n8k4; each output element is the same four exact products added to the same accumulator,
// and GpuMhc.MixM16EqualsM8 checks that the two shapes give the same bits. hc_post_mix_kernel (below) is the same
// reduction over the streams hc_post writes as it stages them (prefill's attention sites, session 39).
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/mhc/mhc_launch.h"
#include "ops/mhc/mhc_post.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRowF = kHcChunk + 4;  // padded row (floats): conflict-free fragment reads (row r -> banks 4r..)
constexpr int kWarpK = kHcChunk / kWarps;  // 16 k per warp per chunk: 4 mma k-steps
static_assert(kWarpK % 4 == 0, "whole mma k-steps per warp");

__device__ __forceinline__ void dmma(double (&d)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
}
// sm_90's m16n8k4 shape: two m8 tiles stacked (rows gr and gr + 8 of the 16: a0 / a1 in, d0 / d1 out, each with the
// m8n8k4 fragment layout), one instruction for the 16 x 8 x 4 products. The m8n8k4 shape is Ampere's; the m16n8k*
// f64 shapes are new in sm_90 (session 16's A/B of the two: bench/NOTES.md).
__device__ __forceinline__ void dmma16(double (&d0)[2], double (&d1)[2], double a0, double a1, double b) {
  asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
               : "+d"(d0[0]), "+d"(d0[1]), "+d"(d1[0]), "+d"(d1[1])
               : "d"(a0), "d"(a1), "d"(b));
}

// 16 bytes global -> shared; valid == false fills zeros (src is then not read).
__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Pipeline depth: 3 stages (two chunks in flight while one is multiplied: at 4,096 tokens a chunk's fp64 MMAs take
// less time than its load, so two stages left the load latency exposed) where three stages keep two blocks per SM
// (<= 112 KB), else 2 (n > 4: ten n-tiles). The depth changes when a chunk arrives, never the order of the sums.
template <int MT, int NT>
constexpr int mix_stages() {
  return size_t(3) * (8 * MT + 8 * NT) * kRowF * sizeof(float) <= size_t(112) * 1024 ? 3 : 2;
}

template <int MT, int NT>
constexpr size_t mix_smem_bytes() {
  const size_t stages = size_t(mix_stages<MT, NT>()) * (8 * MT + 8 * NT) * kRowF * sizeof(float);
  const size_t red = size_t(kWarps) * (8 * MT) * (8 * NT + 1) * sizeof(double);
  return stages > red ? stages : red;
}

// Stage chunk c (k0 = c * kHcChunk) of the tile's tokens and the fn rows into `st` ([8 MT + 8 NT][kRowF] floats).
template <int MT, int NT>
__device__ __forceinline__ void stage_chunk(float* st, const float* __restrict__ fn, int mixes,
                                            const float* __restrict__ X, const int32_t* __restrict__ rows,
                                            int64_t T, int64_t len, int64_t tok0, int64_t c) {
  constexpr int kRows = 8 * MT + 8 * NT, kQ = kHcChunk / 4;
  const int64_t k0 = c * kHcChunk;
  for (int i = threadIdx.x; i < kRows * kQ; i += kThreads) {
    const int r = i / kQ, q = i % kQ;
    const int64_t k = k0 + 4 * q;
    const float* src = fn;  // any valid address when nothing is read
    bool ok = k < len;
    if (r < 8 * MT) {
      const int64_t tok = tok0 + r;
      ok = ok && tok < T;
      if (ok) src = X + (rows ? int64_t(rows[tok]) : tok) * len + k;
    } else {
      const int m = r - 8 * MT;
      ok = ok && m < mixes;
      if (ok) src = fn + int64_t(m) * len + k;
    }
    cp_async16(st + r * kRowF + 4 * q, src, ok);
  }
}

// The staging of a block's chunks without a row list (hc_pre): thread (warp w, lane) copies the 16 bytes at k0 +
// 4 lane of token row w + 8 j (j < MT) and fn row w + 8 j (j < NT) of every chunk (stage_chunk's (r, q) order: a
// stage's rows are 8 MT + 8 NT, 32 lanes of 16 bytes each). Each slot's source row is fixed for the block, so a
// chunk costs an add and a cp.async a slot, where stage_chunk's general loop (a row list, per-element bounds and
// divisions) took ~250 instructions a thread and a chunk: issue-bound, 4x the warps' math (ncu, session 37). A
// slot outside T or the mixes, or a column past len (a last partial chunk), zero-fills as stage_chunk does.
template <int MT, int NT>
struct StageSlots {
  const float* x;  // X row tok0 + warp, column 4 lane
  const float* f;  // fn row warp, column 4 lane
  int64_t row8;    // 8 rows of X and fn
  unsigned xvalid = 0, fvalid = 0;  // bit j: token row tok0 + warp + 8 j < T / fn row warp + 8 j < mixes

  __device__ StageSlots(const float* __restrict__ fn, int mixes, const float* __restrict__ X, int64_t T, int64_t len,
                        int64_t tok0) {
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    x = X + (tok0 + warp) * len + 4 * lane;
    f = fn + int64_t(warp) * len + 4 * lane;
    row8 = 8 * len;
#pragma unroll
    for (int j = 0; j < MT; ++j) xvalid |= unsigned(tok0 + warp + 8 * j < T) << j;
#pragma unroll
    for (int j = 0; j < NT; ++j) fvalid |= unsigned(warp + 8 * j < mixes) << j;
  }

  __device__ __forceinline__ void stage(float* st, const float* __restrict__ fn, int64_t len, int64_t c) const {
    constexpr int kQ = kHcChunk / 4;
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    const int64_t k0 = c * kHcChunk;
    const bool kin = k0 + 4 * lane < len;
    float* dst = st + warp * kRowF + 4 * lane;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const bool ok = kin && ((xvalid >> j) & 1u);
      cp_async16(dst + 8 * j * kRowF, ok ? x + j * row8 + k0 : fn, ok);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const bool ok = kin && ((fvalid >> j) & 1u);
      cp_async16(dst + (8 * MT + 8 * j) * kRowF, ok ? f + j * row8 + k0 : fn, ok);
    }
    static_assert(kQ == 32, "a row of a stage is one warp's 32 16-byte copies");
  }
};

// One staged chunk of the reduction into the warp's accumulators: warp w multiplies the chunk's k-slice
// [16 w, 16 w + 16) of the tile's rows xs ([8 MT][kRowF]) against the fn rows fs ([8 NT][kRowF]), and adds the
// squares of its x values into ss (the RMS's sum).
template <int MT, int NT, bool kM16>
__device__ __forceinline__ void mix_chunk(const float* xs, const float* fs, double (&acc)[MT][NT][2],
                                          double (&ss)[MT]) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, gr = lane >> 2, kq = lane & 3;
#pragma unroll
  for (int ks = 0; ks < kWarpK / 4; ++ks) {
    const int kk = warp * kWarpK + 4 * ks + kq;  // A[gr][kq], B[kq][gr] of this k-step
    double a[MT], b[NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt] = double(xs[(8 * mt + gr) * kRowF + kk]);
      ss[mt] = fma(a[mt], a[mt], ss[mt]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) b[nt] = double(fs[(8 * nt + gr) * kRowF + kk]);
    if constexpr (kM16) {
      static_assert(MT % 2 == 0, "m16 tiles pair the m8 tiles");
#pragma unroll
      for (int mt = 0; mt < MT; mt += 2)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) dmma16(acc[mt][nt], acc[mt + 1][nt], a[mt], a[mt + 1], b[nt]);
    } else {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) dmma(acc[mt][nt], a[mt], b[nt]);
    }
  }
}

// After a block's last chunk (every stage consumed and a barrier passed): the 8 warps' sums added in warp order
// through `red` (the stages' shared memory, [kWarps][8 MT][8 NT + 1] doubles) and written once per (token, split,
// mix) into the token's output row y[t], viewed as doubles [splits, mixes + 1] (split = blockIdx.y).
template <int MT, int NT>
__device__ __forceinline__ void write_partials(double* red, const double (&acc)[MT][NT][2], const double (&ss)[MT],
                                               int mixes, int64_t T, int64_t tok0, int64_t dim, float* y) {
  constexpr int TT = 8 * MT, NR = 8 * NT;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, gr = lane >> 2, kq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    double* rr = red + (warp * TT + 8 * mt + gr) * (NR + 1);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      rr[8 * nt + 2 * kq] = acc[mt][nt][0];  // C[gr][2 kq + v]
      rr[8 * nt + 2 * kq + 1] = acc[mt][nt][1];
    }
    double sq = 0.0;  // the 4 lanes of the row (k = kq mod 4), in lane order
#pragma unroll
    for (int i = 0; i < 4; ++i) sq += __shfl_sync(0xffffffffu, ss[mt], (lane & ~3) + i);
    if (kq == 0) rr[NR] = sq;
  }
  __syncthreads();
  const int R = mixes + 1;
  for (int e = threadIdx.x; e < TT * R; e += kThreads) {
    const int tt = e / R, r = e % R, col = r < mixes ? r : NR;
    const int64_t tok = tok0 + tt;
    if (tok >= T) continue;
    double v = 0.0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[(w * TT + tt) * (NR + 1) + col];
    reinterpret_cast<double*>(y + tok * dim)[int64_t(blockIdx.y) * R + r] = v;
  }
}

// kM16 (MT even): the m-tiles in pairs on the m16n8k4 shape.
template <int MT, int NT, bool kM16>
__global__ void __launch_bounds__(kThreads) hc_mix_mma_kernel(const float* __restrict__ fn, int mixes,
                                                              const float* __restrict__ X,
                                                              const int32_t* __restrict__ rows, int64_t T,
                                                              int64_t len, int64_t dim, int cps, float* y) {
  dsinfer::cuda::pdl_wait_then_release();
  constexpr int TT = 8 * MT, NR = 8 * NT, kStageF = (TT + NR) * kRowF, kStages = mix_stages<MT, NT>();
  extern __shared__ __align__(16) float sm[];  // kStages stages; after the loop: the warps' sums [kWarps][TT][NR + 1]
  const int64_t tok0 = int64_t(blockIdx.x) * TT, nchunks = (len + kHcChunk - 1) / kHcChunk;
  const int64_t c0 = int64_t(blockIdx.y) * cps, c1 = c0 + cps < nchunks ? c0 + cps : nchunks;
  double acc[MT][NT][2], ss[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ss[mt] = 0.0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = 0.0;
  }
  // Chunk c0 + i lives in stage i % kStages; one commit group per chunk (possibly empty), so "all but the newest
  // kStages - 1 groups complete" means chunk c has arrived. Without a row list the fixed slots stage it (StageSlots).
  const StageSlots<MT, NT> slots(fn, mixes, X, T, len, tok0);
  auto stage = [&](float* st, int64_t c) {
    if (rows) stage_chunk<MT, NT>(st, fn, mixes, X, rows, T, len, tok0, c);
    else slots.stage(st, fn, len, c);
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (c0 + i < c1) stage(sm + i * kStageF, c0 + i);
    cp_commit();
  }
  for (int64_t c = c0; c < c1; ++c) {
    const int s = int((c - c0) % kStages);
    // the stage refilled here was read in the previous iteration, which ended with a barrier
    const int64_t next = c + kStages - 1;
    if (next < c1) stage(sm + int((next - c0) % kStages) * kStageF, next);
    cp_commit();
    cp_wait<kStages - 1>();
    __syncthreads();
    const float* xs = sm + s * kStageF;
    mix_chunk<MT, NT, kM16>(xs, xs + TT * kRowF, acc, ss);
    __syncthreads();  // stage s is refilled by the next iteration
  }
  cp_wait<0>();
  __syncthreads();
  write_partials<MT, NT>(reinterpret_cast<double*>(sm), acc, ss, mixes, T, tok0, dim, y);
}

// hc_post fused with the next site's mixing reduction (launch_hc_post_mix, V4's prefill: n = 4, 24 mixes, the
// 32-token tile, f a buffer). Chunk c of a split is channels [32 c, 32 c + 32) of all four streams: the reduction's
// k = s * dim + 32 c + [0, 32) for s = 0..3, staged as one kHcChunk-wide row (stream s at columns [32 s, 32 s + 32))
// with the fn rows alike, so the multiply is mix_chunk's. Between a chunk's arrival and its multiply the block runs
// hc_post on it: thread (token tid / 8, float4 column tid % 8) reads the four old streams and f from the stage, forms
// the new streams with hc_post_kernel's arithmetic (hc_post_stream4) and writes them to X and over the stage. The
// block owns its tokens' channels of the split, so the in-place write cannot race another block. Each token's sums
// run over the chunks in order and, within a chunk, the four streams in order: another order than
// hc_mix_mma_kernel's (stream by stream), so the mixes may differ from the unfused call's in the last bits of the
// double sums (none did in GpuMhc.PostMixEqualsPostThenPre's cases).
constexpr int kPmN = 4, kPmMixes = (2 + kPmN) * kPmN, kPmCols = kHcPostMixCols, kPmFRow = kPmCols + 4;
constexpr int kPmTT = kHcPostMixTile, kPmStages = 3;
static_assert(kPmCols * kPmN == kHcChunk, "a chunk is kHcChunk values of the reduction");
constexpr int kPmStageF = (kPmTT + kPmMixes) * kRowF + kPmTT * kPmFRow;  // x and fn rows, then f's
constexpr size_t kPmSmem = size_t(kPmStages) * kPmStageF * sizeof(float);
static_assert(size_t(kWarps) * kPmTT * (kPmMixes + 1) * sizeof(double) <= kPmSmem, "the warps' sums fit the stages");
static_assert(kPmSmem <= size_t(112) * 1024, "two blocks per SM");

__global__ void __launch_bounds__(kThreads, 2)
    hc_post_mix_kernel(const float* __restrict__ fn, const float* __restrict__ f, const float* __restrict__ post,
                       const float* __restrict__ comb, float* X, int64_t T, int64_t dim, int cps, float* y) {
  dsinfer::cuda::pdl_wait_then_release();
  constexpr int MT = kPmTT / 8, NT = kPmMixes / 8, kStageF = kPmStageF;
  extern __shared__ __align__(16) float sm[];  // kPmStages stages; after the loop: the warps' sums
  __shared__ float s_post[kPmTT * kPmN], s_comb[kPmTT * kPmN * kPmN];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int64_t tok0 = int64_t(blockIdx.x) * kPmTT, len = kPmN * dim, nchunks = dim / kPmCols;
  const int64_t c0 = int64_t(blockIdx.y) * cps, c1 = c0 + cps < nchunks ? c0 + cps : nchunks;
  for (int i = threadIdx.x; i < kPmTT * kPmN * kPmN; i += kThreads) {
    const int64_t tok = tok0 + i / (kPmN * kPmN);
    s_comb[i] = tok < T ? comb[tok0 * kPmN * kPmN + i] : 0.0f;
    if (i < kPmTT * kPmN) s_post[i] = tok0 + i / kPmN < T ? post[tok0 * kPmN + i] : 0.0f;
  }
  // Fixed copy slots (as StageSlots): lane's 16 bytes 4 (lane % 8) of stream lane / 8, token rows warp + 8 j and fn
  // rows warp + 8 j; f's row tid / 8.
  const int ps = lane >> 3, pq = 4 * (lane & 7);
  const float* xsrc = X + (tok0 + warp) * len + ps * dim + pq;
  const float* fnsrc = fn + int64_t(warp) * len + ps * dim + pq;
  const int ftok = int(threadIdx.x) >> 3;
  const float* f_src = f + (tok0 + ftok) * dim + pq;
  auto stage = [&](float* st, int64_t c) {
    const int64_t d0 = c * kPmCols;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const bool ok = tok0 + warp + 8 * j < T;
      cp_async16(st + (warp + 8 * j) * kRowF + ps * kPmCols + pq, ok ? xsrc + 8 * j * len + d0 : fn, ok);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
      cp_async16(st + (kPmTT + warp + 8 * j) * kRowF + ps * kPmCols + pq, fnsrc + 8 * j * len + d0, true);
    const bool ok = tok0 + ftok < T;
    cp_async16(st + (kPmTT + kPmMixes) * kRowF + ftok * kPmFRow + pq, ok ? f_src + d0 : fn, ok);
  };
  double acc[MT][NT][2], ss[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    ss[mt] = 0.0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = 0.0;
  }
#pragma unroll
  for (int i = 0; i < kPmStages - 1; ++i) {
    if (c0 + i < c1) stage(sm + i * kStageF, c0 + i);
    cp_commit();
  }
  const int ct = ftok, cq = int(threadIdx.x) & 7;  // this thread's hc_post: token row ct, float4 column cq
  const bool live = tok0 + ct < T;
  for (int64_t c = c0; c < c1; ++c) {
    const int s = int((c - c0) % kPmStages);
    const int64_t next = c + kPmStages - 1;
    if (next < c1) stage(sm + int((next - c0) % kPmStages) * kStageF, next);
    cp_commit();
    cp_wait<kPmStages - 1>();
    __syncthreads();
    float* xs = sm + s * kStageF;
    if (live) {
      float* xrow = xs + ct * kRowF + 4 * cq;
      float4 old[kPmN];
#pragma unroll
      for (int j = 0; j < kPmN; ++j) old[j] = *reinterpret_cast<const float4*>(xrow + j * kPmCols);
      const float4 fv = *reinterpret_cast<const float4*>(xs + (kPmTT + kPmMixes) * kRowF + ct * kPmFRow + 4 * cq);
      float* xg = X + (tok0 + ct) * len + c * kPmCols + 4 * cq;
#pragma unroll
      for (int k = 0; k < kPmN; ++k) {
        const float4 o = hc_post_stream4<kPmN>(k, kPmN, old, fv, s_post + ct * kPmN, s_comb + ct * kPmN * kPmN);
        *reinterpret_cast<float4*>(xrow + k * kPmCols) = o;
        *reinterpret_cast<float4*>(xg + k * dim) = o;
      }
    }
    __syncthreads();  // the new streams staged before any warp multiplies them
    mix_chunk<MT, NT, true>(xs, xs + kPmTT * kRowF, acc, ss);
    __syncthreads();  // stage s is refilled by the next iteration
  }
  cp_wait<0>();
  __syncthreads();
  write_partials<MT, NT>(reinterpret_cast<double*>(sm), acc, ss, kPmMixes, T, tok0, dim, y);
}

template <int MT, int NT, bool kM16 = false>
void launch_mix(const HcNormParams& p, int mixes, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp,
                float* y, cudaStream_t st) {
  constexpr size_t smem = mix_smem_bytes<MT, NT>();
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(hc_mix_mma_kernel<MT, NT, kM16>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const dim3 grid(unsigned((T + 8 * MT - 1) / (8 * MT)), unsigned(sp.splits));
  dsinfer::cuda::pdl_launch(hc_mix_mma_kernel<MT, NT, kM16>, grid, dim3(kThreads), smem, st, p.fn, mixes, X, rows, T,
                            p.n * p.dim, p.dim, int(sp.chunks_per_split), y);
}
}  // namespace

void launch_hc_mix(const HcNormParams& p, const float* X, const int32_t* rows, int64_t T, const HcSplit& sp, float* y,
                   void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const int n = int(p.n), mixes = rows ? n : (2 + n) * n;  // <= 80: at most 10 n-tiles
  const bool wide_tile = sp.tile == 32 && mixes <= 24;    // hc_tile never asks for 32 with more mixes
  if (mixes <= 8) {
    if (wide_tile && sp.mma16) launch_mix<4, 1, true>(p, mixes, X, rows, T, sp, y, st);
    else if (wide_tile) launch_mix<4, 1>(p, mixes, X, rows, T, sp, y, st);
    else launch_mix<1, 1>(p, mixes, X, rows, T, sp, y, st);
  } else if (mixes <= 24) {
    if (wide_tile && sp.mma16) launch_mix<4, 3, true>(p, mixes, X, rows, T, sp, y, st);
    else if (wide_tile) launch_mix<4, 3>(p, mixes, X, rows, T, sp, y, st);
    else launch_mix<1, 3>(p, mixes, X, rows, T, sp, y, st);
  } else {
    launch_mix<1, 10>(p, mixes, X, rows, T, sp, y, st);
  }
}

void launch_hc_post_mix(const HcNormParams& next, int64_t T, const float* f, const float* post, const float* comb,
                        float* X, const HcSplit& sp, float* y, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 grid(unsigned((T + kPmTT - 1) / kPmTT), unsigned(sp.splits));
  cudaFuncSetAttribute(hc_post_mix_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPmSmem));
  dsinfer::cuda::pdl_launch(hc_post_mix_kernel, grid, dim3(kThreads), kPmSmem, st, next.fn, f, post, comb, X, T,
                            next.dim, int(sp.chunks_per_split), y);
}

}  // namespace dsinfer::ops::cuda::detail
