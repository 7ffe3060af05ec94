// GEMV / skinny GEMM for 1..16 x rows (decode, speculative verify), FP8_BLOCK or BF16 weights, fp32 x and y, fp32
// CUDA-core FMAs (e4m3 / bf16 are exact in fp32, so products are exact; only the summation order differs from the
// CPU reference). Bandwidth-bound design:
//  - each warp owns kGemvRowsPerWarp weight rows and one K step per staged chunk; every lane issues all its 16-byte
//    weight loads (rows x vectors, L1 no-allocate) before the block stages the x chunk, so the weight latency
//    overlaps the x staging and each thread keeps 4..8 loads in flight (at mt = 1 the next chunk's loads are
//    issued before this chunk's FMAs);
//  - x chunk [mt, kc] in shared memory (fp32, 4 floats of padding per weight vector: conflict-free float4 reads),
//    read once per 4 weight rows;
//  - the FP8 128x128 block scale is applied to the dequantized weights of each 16-element vector (one scale per
//    vector since block_k % 16 == 0; e8m0 scales are powers of two, so this is exact);
//  - small N: the K steps of a chunk are split over wk warps of a block and their partials summed through shared
//    memory in warp order after a fixed butterfly inside each warp: deterministic, no atomics, no workspace;
//  - block shape (wk, wr) from plan_gemm_gemv (gemm_plan.cpp): enough blocks for the SMs, x chunk <= kGemvXsBudget;
//  - whole tiles (GemvParams::even, the template's EVEN; every V4-Flash decode weight up to 8 x rows): no bounds
//    checks, shifts for the chunk and scale-block indices, one scale a vector for the warp's rows (they share a
//    scale row), multiplying the x slice at 1-2 x rows: the same products in the same order, so the same bits. At one
//    row the kernel is half issue-bound (ncu), so the instructions a vector set its time.
#include "cuda/pdl.cuh"
#include "ops/gemm/gemm_dequant.cuh"

namespace dsinfer::ops::cuda::detail {
namespace {

template <WeightFormat F, int MT>
struct GvCfg {
  static constexpr int VE = int(vec_elems(F));  // weight elements per 16-byte vector
  static constexpr int VS = VE + 4;             // floats per vector slice of staged x (padded)
  static constexpr int VPL = gemv_vpl(MT);
  static constexpr int RW = kGemvRowsPerWarp;
  static constexpr int STEP = 32 * VPL * VE;  // K elements per warp step
};

__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Elements 4q..4q+3 of a 16-byte weight vector as floats (unscaled).
template <WeightFormat F>
__device__ __forceinline__ void dequant4(const uint4& v, int q, float (&o)[4]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  if constexpr (F == WeightFormat::FP8_BLOCK) {
    const float2 lo = e4m3x2_to_float2(words[q]), hi = e4m3x2_to_float2(words[q] >> 16);
    o[0] = lo.x;
    o[1] = lo.y;
    o[2] = hi.x;
    o[3] = hi.y;
  } else {  // BF16: words 2q, 2q + 1
    o[0] = bits_f(words[2 * q] << 16);
    o[1] = bits_f(words[2 * q] & 0xFFFF0000u);
    o[2] = bits_f(words[2 * q + 1] << 16);
    o[3] = bits_f(words[2 * q + 1] & 0xFFFF0000u);
  }
}

// Stages x[0..M) [k0, k0 + kc) into shared memory (zeros past K), slot of offset c: (c / VE) * VS + c % VE. EVEN:
// every chunk is whole (K % kc == 0) and kc a power of two.
template <WeightFormat F, int MT, bool EVEN>
__device__ __forceinline__ void stage_x(const GemmArgs& a, const GemvParams& p, int64_t g, int64_t k0, float* xs) {
  using C = GvCfg<F, MT>;
  const int64_t kcc = a.K - k0 < p.kc ? a.K - k0 : p.kc;  // a multiple of 4 (K % VE == 0)
  const int n4 = p.kc / 4, total = int(a.M) * n4;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int m = EVEN ? i >> (p.kc_shift - 2) : i / n4;
    const int c = EVEN ? (i & (n4 - 1)) * 4 : (i - m * n4) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (EVEN || c < kcc) {
      const float* src = x_row(a, g, m) + k0 + c;
      if (a.x_vec) v = __ldg(reinterpret_cast<const float4*>(src));
      else v = make_float4(__ldg(src), __ldg(src + 1), __ldg(src + 2), __ldg(src + 3));
    }
    *reinterpret_cast<float4*>(xs + m * p.xs_ld + (c / C::VE) * C::VS + c % C::VE) = v;
  }
}

// One warp step of weight vectors in registers: rows x vectors per lane, with their raw scales (FP8).
template <WeightFormat F, int MT>
struct GvStep {
  uint4 wv[GvCfg<F, MT>::RW][GvCfg<F, MT>::VPL];
  uint32_t sr[GvCfg<F, MT>::RW][GvCfg<F, MT>::VPL];
};

// Issues the 16-byte loads of the warp step at kw (zeros for rows >= N or k >= K). Addressing hoisted by the caller:
// wbase = weight row n_first, srow = each row's scale-row offset (no 64-bit divisions here). EVEN: no bounds to check,
// and the warp's rows share one scale row (srow[0]), so one scale a vector, in sr[0][u].
template <WeightFormat F, int MT, bool EVEN>
__device__ __forceinline__ void load_step(const GemmArgs& a, const GemvParams& p, const uint8_t* wbase,
                                          int64_t row_bytes, int64_t n_first, const uint32_t (&srow)[GvCfg<F, MT>::RW],
                                          const uint8_t* scale, int64_t kw, int lane, GvStep<F, MT>& st) {
  using C = GvCfg<F, MT>;
#pragma unroll
  for (int u = 0; u < C::VPL; ++u) {
    const int64_t k = kw + int64_t(lane + 32 * u) * C::VE;
    if constexpr (EVEN) {
#pragma unroll
      for (int rr = 0; rr < C::RW; ++rr)
        st.wv[rr][u] = ld_stream(wbase + rr * row_bytes + k * (F == WeightFormat::FP8_BLOCK ? 1 : 2));
      if constexpr (F == WeightFormat::FP8_BLOCK) st.sr[0][u] = __ldg(scale + srow[0] + (uint32_t(k) >> p.bk_shift));
    } else {
      const uint32_t kb = F == WeightFormat::FP8_BLOCK ? uint32_t(k) / uint32_t(a.block_k) : 0;  // K < 2^31
#pragma unroll
      for (int rr = 0; rr < C::RW; ++rr) {
        st.wv[rr][u] = make_uint4(0, 0, 0, 0);
        st.sr[rr][u] = 0;
        if (n_first + rr < a.N && k < a.K) {
          st.wv[rr][u] = ld_stream(wbase + rr * row_bytes + k * (F == WeightFormat::FP8_BLOCK ? 1 : 2));
          if constexpr (F == WeightFormat::FP8_BLOCK) st.sr[rr][u] = load_scale_raw(a, scale, srow[rr] + kb);
        }
      }
    }
  }
}

// mt = 1 has the registers to load the next chunk's step while this one is computed (blocks walking several chunks:
// wo_b, wo_a, the lm head keep their loads in flight across the barriers); larger mt would spill.
template <int MT>
inline constexpr bool kGvPrefetch = MT == 1;

// The FMAs of one staged x chunk: this warp's K step of its RW rows against the chunk's x rows (xs), with the
// block scales of the step's vectors.
template <WeightFormat F, int MT, bool EVEN>
__device__ __forceinline__ void fma_step(const GemmArgs& a, const GemvParams& p, const float* xs, int wk, int lane,
                                         const GvStep<F, MT>& cur, float (&acc)[kGemvRowsPerWarp][MT]) {
  using C = GvCfg<F, MT>;
  constexpr int RW = C::RW, VPL = C::VPL, VE = C::VE;
  constexpr bool kFp8 = F == WeightFormat::FP8_BLOCK;
  constexpr bool kScaleX = kFp8 && EVEN && MT < RW;  // the block scale multiplies x (below)
  const int mc = int(a.M);  // <= MT (plan_gemm_gemv)
#pragma unroll
  for (int u = 0; u < VPL; ++u) {
    const float* xv = xs + (wk * (C::STEP / VE) + lane + 32 * u) * C::VS;  // this warp's step slice
    // The block scale, a power of two: each product is w * s * x exactly, whether s multiplies w or x, as long as
    // x * s stays a normal float (|x| >= 2^-126 / s) and finite. EVEN FP8 has one scale for the warp's rows
    // (loaded once); it multiplies the x slice (4 multiplies per x row) while x rows are fewer than the warp's
    // weight rows (4 multiplies each), else the weights.
    float s[RW];
#pragma unroll
    for (int rr = 0; rr < RW; ++rr) {
      s[rr] = 1.0f;
      if constexpr (kFp8 && EVEN) s[rr] = bits_f(sf::e8m0_f32_bits(cur.sr[0][u]));
      else if constexpr (kFp8) s[rr] = scale_value(a, cur.sr[rr][u]);  // zero vectors stay 0
    }
#pragma unroll
    for (int q = 0; q < VE / 4; ++q) {
      float wf[RW][4];
#pragma unroll
      for (int rr = 0; rr < RW; ++rr) {
        dequant4<F>(cur.wv[rr][u], q, wf[rr]);
        if constexpr (kFp8 && !kScaleX)
#pragma unroll
          for (int j = 0; j < 4; ++j) wf[rr][j] *= s[rr];
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < mc) {
          float4 x4 = *reinterpret_cast<const float4*>(xv + m * p.xs_ld + 4 * q);
          if constexpr (kScaleX) {
            x4.x *= s[0];
            x4.y *= s[0];
            x4.z *= s[0];
            x4.w *= s[0];
          }
#pragma unroll
          for (int rr = 0; rr < RW; ++rr) {
            float v = acc[rr][m];
            v = fmaf(wf[rr][0], x4.x, v);
            v = fmaf(wf[rr][1], x4.y, v);
            v = fmaf(wf[rr][2], x4.z, v);
            acc[rr][m] = fmaf(wf[rr][3], x4.w, v);
          }
        }
      }
    }
  }
}

// The warp's sums: a fixed butterfly (every lane ends with the warp's sums; lane (rr * MT + m) % 32 owns item (rr, m)),
// then with one K warp the stores, else the K warps' partials through shared memory (red: [wk][wr][RW][MT]) added in
// warp order (deterministic).
template <int MT, bool EVEN>
__device__ __forceinline__ void store_rows(const GemmArgs& a, const GemvParams& p, int64_t g, int wk, int wr, int lane,
                                           int64_t n_first, float (&acc)[kGemvRowsPerWarp][MT], float* xs) {
  constexpr int RW = kGemvRowsPerWarp;
  const int mc = int(a.M);
#pragma unroll
  for (int rr = 0; rr < RW; ++rr)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[rr][m] += __shfl_xor_sync(0xffffffffu, acc[rr][m], off);
  constexpr int PER = RW * MT;
  if (p.wk == 1) {
#pragma unroll
    for (int rr = 0; rr < RW; ++rr)
#pragma unroll
      for (int m = 0; m < MT; ++m)
        if (lane == (rr * MT + m) % 32 && m < mc && (EVEN || n_first + rr < a.N)) {
          float* yp = y_row(a, g, m) + n_first + rr;
          *yp = a.accumulate ? *yp + acc[rr][m] : acc[rr][m];
        }
    return;
  }
  float* red = xs + MT * p.xs_ld;  // [wk][wr][RW][MT] partials of the K-splitting warps
#pragma unroll
  for (int rr = 0; rr < RW; ++rr)
#pragma unroll
    for (int m = 0; m < MT; ++m)
      if (lane == (rr * MT + m) % 32) red[(wk * p.wr + wr) * PER + rr * MT + m] = acc[rr][m];
  __syncthreads();
  for (int i = threadIdx.x; i < p.wr * PER; i += blockDim.x) {
    const int r = i / PER, rr = (i % PER) / MT, m = i % MT;
    const int64_t n = (int64_t(blockIdx.x) * p.wr + r) * RW + rr;
    if (m >= mc || (!EVEN && n >= a.N)) continue;
    float v = red[r * PER + rr * MT + m];
    for (int j = 1; j < p.wk; ++j) v += red[(j * p.wr + r) * PER + rr * MT + m];  // warp order: deterministic
    float* yp = y_row(a, g, m) + n;
    *yp = a.accumulate ? *yp + v : v;
  }
}

template <WeightFormat F, int MT, bool EVEN>
__global__ void __launch_bounds__(kGemvMaxWarps * 32, 2) gemm_gemv_kernel(const GemmArgs a, const GemvParams p) {
  // PDL (cuda/pdl.h): a weight given by pointer (not a device array of them, which a kernel may have written) is
  // never written by the kernels before this one, so its first K step's loads are issued before the wait and are in
  // flight during the previous kernel's tail; x, y and pointer arrays are touched after it.
  const bool early = a.wdata_arr == nullptr;
  if (!early) dsinfer::cuda::pdl_wait_then_release();
  using C = GvCfg<F, MT>;
  constexpr int RW = C::RW;
  constexpr bool kFp8 = F == WeightFormat::FP8_BLOCK;
  extern __shared__ float4 gv_smem[];
  float* xs = reinterpret_cast<float*>(gv_smem);
  const int64_t g = blockIdx.y;
  const WPtr w = group_weight(a, g);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wk = warp % p.wk, wr = warp / p.wk;
  const int64_t n_first = (int64_t(blockIdx.x) * p.wr + wr) * RW;
  float acc[RW][MT];
#pragma unroll
  for (int rr = 0; rr < RW; ++rr)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[rr][m] = 0.0f;

  // Hoisted addressing (no 64-bit divisions in the loop): row base pointer and each row's scale-row offset (EVEN:
  // the one scale row of the warp's rows, by a shift).
  const int64_t row_bytes = kFp8 ? a.K : 2 * a.K;
  const uint8_t* wbase = w.data + (w.row0 + n_first) * row_bytes;
  uint32_t srow[RW] = {};  // scale arrays hold < 2^31 entries (plan_gemm_gemv)
  if constexpr (kFp8 && EVEN) {
    srow[0] = uint32_t((w.row0 + n_first) >> p.bn_shift) * uint32_t(a.scale_cols);
  } else if constexpr (kFp8) {
#pragma unroll
    for (int rr = 0; rr < RW; ++rr) srow[rr] = uint32_t((w.row0 + n_first + rr) / a.block_n * a.scale_cols);
  }

  if (early && a.K <= 0) dsinfer::cuda::pdl_wait_then_release();  // no K step below: wait before the stores
  GvStep<F, MT> cur;
  if constexpr (kGvPrefetch<MT>)
    load_step<F, MT, EVEN>(a, p, wbase, row_bytes, n_first, srow, w.scale, int64_t(wk) * C::STEP, lane, cur);
  for (int64_t k0 = 0; k0 < a.K; k0 += p.kc) {  // uniform over the block
    GvStep<F, MT> next;
    const int64_t kw = k0 + int64_t(wk) * C::STEP;
    if constexpr (kGvPrefetch<MT>) {
      if (k0 + p.kc < a.K)
        load_step<F, MT, EVEN>(a, p, wbase, row_bytes, n_first, srow, w.scale, kw + p.kc, lane, next);
    } else {
      load_step<F, MT, EVEN>(a, p, wbase, row_bytes, n_first, srow, w.scale, kw, lane, cur);
    }
    if (early && k0 == 0) dsinfer::cuda::pdl_wait_then_release();
    __syncthreads();  // the previous chunk's readers are done
    stage_x<F, MT, EVEN>(a, p, g, k0, xs);
    __syncthreads();
    fma_step<F, MT, EVEN>(a, p, xs, wk, lane, cur, acc);
    if constexpr (kGvPrefetch<MT>)
      if (k0 + p.kc < a.K) cur = next;
  }

  store_rows<MT, EVEN>(a, p, g, wk, wr, lane, n_first, acc, xs);
}

template <WeightFormat F, int MT>
cudaError_t launch(const GemmArgs& a, const GemvParams& p, cudaStream_t s) {
  const int64_t rows = int64_t(kGemvRowsPerWarp) * p.wr;
  const dim3 grid(unsigned((a.N + rows - 1) / rows), unsigned(a.groups));
  const dim3 block(unsigned(32 * p.wk * p.wr));
  if constexpr (MT <= kGemvEvenMaxMt)
    if (p.even) return dsinfer::cuda::pdl_launch(gemm_gemv_kernel<F, MT, true>, grid, block, size_t(p.smem), s, a, p);
  return dsinfer::cuda::pdl_launch(gemm_gemv_kernel<F, MT, false>, grid, block, size_t(p.smem), s, a, p);
}

template <WeightFormat F>
cudaError_t launch_fmt(const GemmArgs& a, const GemvParams& p, cudaStream_t s) {
  switch (p.mt) {
    case 1: return launch<F, 1>(a, p, s);
    case 2: return launch<F, 2>(a, p, s);
    case 4: return launch<F, 4>(a, p, s);
    case 8: return launch<F, 8>(a, p, s);
    case 16: return launch<F, 16>(a, p, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int launch_gemm_gemv(WeightFormat f, const GemmArgs& a, const GemvParams& p, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (f == WeightFormat::FP8_BLOCK) return int(launch_fmt<WeightFormat::FP8_BLOCK>(a, p, s));
  if (f == WeightFormat::BF16) return int(launch_fmt<WeightFormat::BF16>(a, p, s));
  return int(cudaErrorInvalidValue);
}

}  // namespace dsinfer::ops::cuda::detail
