// Tiled tensor-core GEMM for large M (prefill, MoE with many tokens per expert): block tile 64 x 128 x 32,
// 8 warps of 32 x 32, mma.sync m16n8k16 bf16 x bf16 -> fp32. Each K step, every thread converts its x run (fp32 ->
// bf16) and dequantizes its weight run (storage format -> fp32 -> bf16) into shared memory; the global loads of
// step k+1 are issued before the mma work of step k (register prefetch). Layouts: ops/gemm/gemm_common.h.
#include <cuda_bf16.h>

#include "ops/gemm/gemm_dequant.cuh"

namespace dsinfer::ops::cuda::detail {
namespace {

using gd::kBK;
using gd::kBM;
using gd::kBN;
using gd::kLds;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  union {
    __nv_bfloat162 v;
    uint32_t u;
  } c;
  c.v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return c.u;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Per-thread raw global data of one K step (loaded one step ahead).
struct Raw {
  float4 x0, x1;       // x run (vector path)
  uint4 w[4];          // weight run (vector path); F32 uses 4, BF16 2, FP8 1, FP4 .x/.y of w[0]
  uint32_t sraw;       // raw scale of the weight run (FP8 / FP4)
  bool xv, wv;         // this step uses the vector path
};

template <WeightFormat F>
__device__ __forceinline__ void load_raw(const GemmArgs& a, const WPtr& w, const float* xr, bool x_ok, int64_t n,
                                         bool n_ok, int64_t k_x, int64_t k_w, Raw& r) {
  r.xv = a.x_vec && x_ok && k_x + gd::kXLoadRun <= a.K;
  if (r.xv) {
    r.x0 = __ldg(reinterpret_cast<const float4*>(xr + k_x));
    r.x1 = __ldg(reinterpret_cast<const float4*>(xr + k_x + 4));
  }
  r.wv = a.w_vec && n_ok && k_w + gd::kWLoadRun <= a.K;
  if (r.wv) {
    if constexpr (F == WeightFormat::F32) {
      const uint4* p = reinterpret_cast<const uint4*>(w.data + (n * a.K + k_w) * 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) r.w[i] = __ldg(p + i);
    } else if constexpr (F == WeightFormat::BF16) {
      const uint4* p = reinterpret_cast<const uint4*>(w.data + (n * a.K + k_w) * 2);
      r.w[0] = __ldg(p);
      r.w[1] = __ldg(p + 1);
    } else if constexpr (F == WeightFormat::FP8_BLOCK) {
      r.w[0] = __ldg(reinterpret_cast<const uint4*>(w.data + n * a.K + k_w));
      r.sraw = load_scale_raw(a, w.scale, scale_index<F>(a, n, k_w));
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(w.data + n * (a.K / 2) + k_w / 2));
      r.w[0].x = v.x;
      r.w[0].y = v.y;
      r.sraw = load_scale_raw(a, w.scale, scale_index<F>(a, n, k_w));
    }
  }
}

template <WeightFormat F>
__device__ __forceinline__ void store_tiles(const GemmArgs& a, const WPtr& w, const float* xr, bool x_ok, int64_t n,
                                            bool n_ok, int64_t k_x, int64_t k_w, const Raw& r, uint32_t* as_dst,
                                            uint32_t* bs_dst) {
  // x: 8 values -> 4 bf16 pairs (16 bytes)
  float xf[8];
  if (r.xv) {
    xf[0] = r.x0.x;
    xf[1] = r.x0.y;
    xf[2] = r.x0.z;
    xf[3] = r.x0.w;
    xf[4] = r.x1.x;
    xf[5] = r.x1.y;
    xf[6] = r.x1.z;
    xf[7] = r.x1.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) xf[i] = (x_ok && k_x + i < a.K) ? __ldg(xr + k_x + i) : 0.0f;
  }
  *reinterpret_cast<uint4*>(as_dst) = make_uint4(pack_bf16(xf[0], xf[1]), pack_bf16(xf[2], xf[3]),
                                                 pack_bf16(xf[4], xf[5]), pack_bf16(xf[6], xf[7]));
  // weight: 16 values -> 8 bf16 pairs (32 bytes)
  uint32_t o[8];
  if (r.wv) {
    if constexpr (F == WeightFormat::BF16) {
      o[0] = r.w[0].x;
      o[1] = r.w[0].y;
      o[2] = r.w[0].z;
      o[3] = r.w[0].w;
      o[4] = r.w[1].x;
      o[5] = r.w[1].y;
      o[6] = r.w[1].z;
      o[7] = r.w[1].w;
    } else if constexpr (F == WeightFormat::F32) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o[2 * i] = pack_bf16(bits_f(r.w[i].x), bits_f(r.w[i].y));
        o[2 * i + 1] = pack_bf16(bits_f(r.w[i].z), bits_f(r.w[i].w));
      }
    } else if constexpr (F == WeightFormat::FP8_BLOCK) {
      const float s = scale_value(a, r.sraw);
      const uint32_t words[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 lo = e4m3x2_to_float2(words[i]), hi = e4m3x2_to_float2(words[i] >> 16);
        o[2 * i] = pack_bf16(lo.x * s, lo.y * s);
        o[2 * i + 1] = pack_bf16(hi.x * s, hi.y * s);
      }
    } else {
      const float s = scale_value(a, r.sraw);
      const uint32_t words[2] = {r.w[0].x, r.w[0].y};
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          o[4 * i + j] = pack_bf16(bits_f(sf::e2m1_f32_bits(gd::fp4_code_in_word(words[i], 2 * j))) * s,
                                   bits_f(sf::e2m1_f32_bits(gd::fp4_code_in_word(words[i], 2 * j + 1))) * s);
    }
  } else {
    float wf[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) wf[i] = (n_ok && k_w + i < a.K) ? load_w_scalar<F>(a, w, n, k_w + i) : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = pack_bf16(wf[2 * i], wf[2 * i + 1]);
  }
  reinterpret_cast<uint4*>(bs_dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
  reinterpret_cast<uint4*>(bs_dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

template <WeightFormat F>
__global__ void __launch_bounds__(gd::kTiledThreads) gemm_tiled_kernel(const GemmArgs a) {
  __shared__ __align__(16) __nv_bfloat16 As[kBM * kLds];
  __shared__ __align__(16) __nv_bfloat16 Bs[kBN * kLds];
  const int64_t g = blockIdx.y;
  int64_t r_begin, r_count;
  group_rows(a, g, r_begin, r_count);
  const int64_t n_tile = int64_t(blockIdx.x) * kBN;
  if (r_count <= 0 || n_tile >= a.N) return;  // uniform over the block
  const WPtr w = group_weight(a, g);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const gd::Coord xl = gd::x_load_coord(tid), wl = gd::w_load_coord(tid), wo = gd::warp_origin(warp);
  const int64_t n_local = n_tile + wl.row;
  const bool n_ok = n_local < a.N;
  const int64_t n = w.row0 + n_local;
  uint32_t* as_dst = reinterpret_cast<uint32_t*>(As + xl.row * kLds + xl.col);
  uint32_t* bs_dst = reinterpret_cast<uint32_t*>(Bs + wl.row * kLds + wl.col);
  const int64_t k_tiles = (a.K + kBK - 1) / kBK;

  for (int64_t m_tile = int64_t(blockIdx.z) * kBM; m_tile < r_count; m_tile += int64_t(gridDim.z) * kBM) {
    const bool x_ok = m_tile + xl.row < r_count;
    const float* xr = x_ok ? x_row(a, g, r_begin + m_tile + xl.row) : a.x;
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.0f;

    Raw raw{};
    load_raw<F>(a, w, xr, x_ok, n, n_ok, xl.col, wl.col, raw);
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      const int64_t k0 = kt * kBK;
      store_tiles<F>(a, w, xr, x_ok, n, n_ok, k0 + xl.col, k0 + wl.col, raw, as_dst, bs_dst);
      __syncthreads();
      if (kt + 1 < k_tiles) load_raw<F>(a, w, xr, x_ok, n, n_ok, k0 + kBK + xl.col, k0 + kBK + wl.col, raw);
#pragma unroll
      for (int ks = 0; ks < kBK; ks += 16) {
        uint32_t af[2][4], bf[4][2];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const gd::Coord c = gd::frag_a(lane, r);
            af[mi][r] = *reinterpret_cast<const uint32_t*>(As + (wo.row + mi * 16 + c.row) * kLds + ks + c.col);
          }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const gd::Coord c = gd::frag_b(lane, r);
            bf[ni][r] = *reinterpret_cast<const uint32_t*>(Bs + (wo.col + ni * 8 + c.row) * kLds + ks + c.col);
          }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni]);
      }
      __syncthreads();
    }
    // epilogue: fp32 accumulators straight to y (bounds-checked)
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const gd::Coord c = gd::frag_c(lane, j);
          const int64_t row = m_tile + wo.row + mi * 16 + c.row, col = n_tile + wo.col + ni * 8 + c.col;
          if (row < r_count && col < a.N) {
            float* yp = y_row(a, g, r_begin + row) + col;
            *yp = a.accumulate ? *yp + acc[mi][ni][j] : acc[mi][ni][j];
          }
        }
  }
}

template <WeightFormat F>
void launch(const GemmArgs& a, cudaStream_t s) {
  const dim3 grid(unsigned((a.N + kBN - 1) / kBN), unsigned(a.groups), unsigned(a.m_tiles_z));
  gemm_tiled_kernel<F><<<grid, gd::kTiledThreads, 0, s>>>(a);
}

}  // namespace

void launch_gemm_tiled(WeightFormat f, const GemmArgs& a, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (f) {
    case WeightFormat::F32: return launch<WeightFormat::F32>(a, s);
    case WeightFormat::BF16: return launch<WeightFormat::BF16>(a, s);
    case WeightFormat::FP8_BLOCK: return launch<WeightFormat::FP8_BLOCK>(a, s);
    case WeightFormat::FP4_G32: return launch<WeightFormat::FP4_G32>(a, s);
  }
}

}  // namespace dsinfer::ops::cuda::detail
