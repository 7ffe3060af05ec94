// Streaming GEMM for few rows (decode): y rows computed in fp32 on CUDA cores while the weight is read once per
// chunk of kSkMaxM x rows. Each warp owns kSkRowsPerWarp weight rows; each lane loads 16-byte weight vectors
// (kSkVecPerLane per row per K chunk, issued one chunk ahead: the next chunk's loads are in flight while this one
// is staged and computed; session 19), dequantizes them in registers and dots them with
// the x chunk held in shared memory (fp32, padded by 4 floats per vector so lanes hit distinct banks). Lane
// partial sums are reduced with a fixed butterfly, so the result is deterministic.
// Requires (checked by the caller, GemmArgs::w_vec): K % vec_elems == 0, 16-byte aligned weight rows, FP8
// block_k % 16 == 0 (one scale per vector).
#include "cuda/pdl.cuh"
#include "ops/gemm/gemm_dequant.cuh"
#include "ops/gemm/gemm_segments_launch.h"

namespace dsinfer::ops::cuda::detail {
namespace {

using gd::kSkMaxM;
using gd::kSkRowsPerWarp;
using gd::kSkVecPerLane;
using gd::kSkWarps;

template <WeightFormat F>
struct SkFmt {
  static constexpr int VE = int(vec_elems(F));       // weight elements per 16-byte vector
  static constexpr int PAD = VE >= 8 ? 4 : 0;          // floats of padding after each vector's x slice
  static constexpr int KC = 32 * kSkVecPerLane * VE;   // K chunk held in shared memory
  static constexpr int KCP = KC + (KC / VE) * PAD;     // padded floats per x row in shared memory
  static constexpr size_t kSmem = size_t(kSkMaxM) * KCP * sizeof(float);
};

template <WeightFormat F>
__device__ __forceinline__ const uint4* vec_ptr(const GemmArgs& a, const WPtr& w, int64_t n, int64_t k) {
  if constexpr (F == WeightFormat::F32) return reinterpret_cast<const uint4*>(w.data + (n * a.K + k) * 4);
  else if constexpr (F == WeightFormat::BF16) return reinterpret_cast<const uint4*>(w.data + (n * a.K + k) * 2);
  else if constexpr (F == WeightFormat::FP8_BLOCK) return reinterpret_cast<const uint4*>(w.data + n * a.K + k);
  else return reinterpret_cast<const uint4*>(w.data + n * (a.K / 2) + k / 2);
}

// Dequantizes one 16-byte vector into VE floats (without the scale; the caller scales the dot product).
template <WeightFormat F>
__device__ __forceinline__ void unpack(const uint4& v, float (&wf)[SkFmt<F>::VE]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (F == WeightFormat::F32) {
      wf[i] = bits_f(words[i]);
    } else if constexpr (F == WeightFormat::BF16) {
      wf[2 * i] = bits_f(words[i] << 16);
      wf[2 * i + 1] = bits_f(words[i] & 0xFFFF0000u);
    } else if constexpr (F == WeightFormat::FP8_BLOCK) {
      const float2 lo = e4m3x2_to_float2(words[i]), hi = e4m3x2_to_float2(words[i] >> 16);
      wf[4 * i] = lo.x, wf[4 * i + 1] = lo.y, wf[4 * i + 2] = hi.x, wf[4 * i + 3] = hi.y;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) wf[8 * i + j] = bits_f(sf::e2m1_f32_bits(gd::fp4_code_in_word(words[i], j)));
    }
  }
}

// One K chunk's weight vectors of a warp's rows in registers (zeros past N or K), with their raw scales.
template <WeightFormat F>
struct SkStep {
  uint4 wv[kSkRowsPerWarp][kSkVecPerLane];
  uint32_t sr[kSkRowsPerWarp][kSkVecPerLane];
};

// Issues the loads of the chunk at k0 (rows n_first.. of the warp, vectors lane + 32 u).
template <WeightFormat F>
__device__ __forceinline__ void skinny_load(const GemmArgs& a, const WPtr& w, int64_t n_first, int lane, int64_t k0,
                                            SkStep<F>& st) {
  using T = SkFmt<F>;
  const int kc = int(a.K - k0 < T::KC ? a.K - k0 : T::KC);
  const int nv = kc / T::VE;
#pragma unroll
  for (int rr = 0; rr < kSkRowsPerWarp; ++rr)
#pragma unroll
    for (int u = 0; u < kSkVecPerLane; ++u) {
      const int64_t nl = n_first + rr;
      const int v = lane + 32 * u;
      st.wv[rr][u] = make_uint4(0, 0, 0, 0);
      st.sr[rr][u] = 0;
      if (nl < a.N && v < nv) {
        const int64_t n = w.row0 + nl, k = k0 + int64_t(v) * T::VE;
        st.wv[rr][u] = __ldg(vec_ptr<F>(a, w, n, k));
        if constexpr (F == WeightFormat::FP8_BLOCK || F == WeightFormat::FP4_G32)
          st.sr[rr][u] = load_scale_raw(a, w.scale, scale_index<F>(a, n, k));
      }
    }
}

// x rows [row0, row0 + mc) x [k0, k0 + kc) into shared memory (row r at xs + r * KCP, offset c at c + (c / VE) *
// PAD). The block's flat [mc, kc / 4] in 4-float quads, each thread's kSkStageBatch loads issued before its stores
// (a row at a time, each element's load waited for before its store, left ~one L2 latency a row and step in series:
// session 45). kc and VE are multiples of 4, so a quad never straddles a padded vector.
constexpr int kSkStageBatch = 8;
template <WeightFormat F>
__device__ __forceinline__ void stage_x(const GemmArgs& a, int64_t g, int64_t row0, int mc, int64_t k0, int kc,
                                        float* xs) {
  using T = SkFmt<F>;
  const int quads = kc / 4, total = mc * quads;
  for (int base = threadIdx.x; base < total; base += kSkStageBatch * kSkWarps * 32) {
    float4 v[kSkStageBatch];
#pragma unroll
    for (int u = 0; u < kSkStageBatch; ++u) {
      const int i = base + u * kSkWarps * 32;
      if (i >= total) continue;
      const int r = i / quads, c = (i - r * quads) * 4;
      const float* xr = x_row(a, g, row0 + r) + k0 + c;
      v[u] = a.x_vec ? __ldg(reinterpret_cast<const float4*>(xr))
                     : make_float4(__ldg(xr), __ldg(xr + 1), __ldg(xr + 2), __ldg(xr + 3));
    }
#pragma unroll
    for (int u = 0; u < kSkStageBatch; ++u) {
      const int i = base + u * kSkWarps * 32;
      if (i >= total) continue;
      const int r = i / quads, c = (i - r * quads) * 4;
      *reinterpret_cast<float4*>(xs + r * T::KCP + c + (c / T::VE) * T::PAD) = v[u];
    }
  }
}

// The work of block (bx, blockIdx.y): weight rows [bx * kSkWarps * kSkRowsPerWarp, +kSkWarps * kSkRowsPerWarp) of
// a's weight for every x row of its group. A row's sums depend on K, the format and its own x row only (lane
// vectors in K order, then the fixed butterfly), never on N or the block: the segments kernel below gives the
// plain kernel's bits. scaled: the written value is v * out_scale (what scale_cuda after the GEMM gives).
template <WeightFormat F>
__device__ __forceinline__ void skinny_block(const GemmArgs& a, int64_t bx, bool scaled, float out_scale,
                                             float* xs) {
  using T = SkFmt<F>;
  const int64_t g = blockIdx.y;
  int64_t r_begin, r_count;
  group_rows(a, g, r_begin, r_count);
  if (r_count <= 0) return;  // uniform over the block
  const WPtr w = group_weight(a, g);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n_first = (bx * kSkWarps + warp) * kSkRowsPerWarp;

  for (int64_t m0 = 0; m0 < r_count; m0 += kSkMaxM) {
    const int mc = int(r_count - m0 < kSkMaxM ? r_count - m0 : kSkMaxM);
    float acc[kSkRowsPerWarp][kSkMaxM];
#pragma unroll
    for (int rr = 0; rr < kSkRowsPerWarp; ++rr)
#pragma unroll
      for (int m = 0; m < kSkMaxM; ++m) acc[rr][m] = 0.0f;

    // The weight vectors of chunk k0 + KC are loaded while chunk k0 is staged and computed (register double
    // buffer): only when loads are issued changes, not a single operation of the sums.
    SkStep<F> cur;
    skinny_load<F>(a, w, n_first, lane, 0, cur);
    for (int64_t k0 = 0; k0 < a.K; k0 += T::KC) {
      const int kc = int(a.K - k0 < T::KC ? a.K - k0 : T::KC);  // a multiple of VE
      __syncthreads();  // the previous chunk's readers are done
      if (mc > 1) {
        stage_x<F>(a, g, r_begin + m0, mc, k0, kc, xs);
      } else {  // one row: the element loop (the batched form measured ~1 us slower a launch here, session 45)
        const float* xr = x_row(a, g, r_begin + m0) + k0;
        for (int c = tid; c < kc; c += kSkWarps * 32) xs[c + (c / T::VE) * T::PAD] = __ldg(xr + c);
      }
      __syncthreads();
      const int nv = kc / T::VE;
      const bool more = k0 + T::KC < a.K;
      SkStep<F> nxt;
      if (more) skinny_load<F>(a, w, n_first, lane, k0 + T::KC, nxt);
#pragma unroll
      for (int rr = 0; rr < kSkRowsPerWarp; ++rr)
#pragma unroll
        for (int u = 0; u < kSkVecPerLane; ++u) {
          const int v = lane + 32 * u;
          if (n_first + rr < a.N && v < nv) {
            float wf[T::VE];
            unpack<F>(cur.wv[rr][u], wf);
            float s = 1.0f;
            if constexpr (F == WeightFormat::FP8_BLOCK || F == WeightFormat::FP4_G32) s = scale_value(a, cur.sr[rr][u]);
            const float4* xv = reinterpret_cast<const float4*>(xs + v * (T::VE + T::PAD));
#pragma unroll
            for (int m = 0; m < kSkMaxM; ++m) {
              if (m < mc) {
                float d = 0.0f;
#pragma unroll
                for (int q = 0; q < T::VE / 4; ++q) {
                  const float4 x4 = xv[m * (T::KCP / 4) + q];
                  d = fmaf(wf[4 * q], x4.x, d);
                  d = fmaf(wf[4 * q + 1], x4.y, d);
                  d = fmaf(wf[4 * q + 2], x4.z, d);
                  d = fmaf(wf[4 * q + 3], x4.w, d);
                }
                acc[rr][m] = fmaf(s, d, acc[rr][m]);
              }
            }
          }
        }
      if (more) cur = nxt;
    }
    // butterfly reduction over the warp (fixed order), lane 0 writes
#pragma unroll
    for (int rr = 0; rr < kSkRowsPerWarp; ++rr)
#pragma unroll
      for (int m = 0; m < kSkMaxM; ++m) {
        float v = acc[rr][m];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        const int64_t nl = n_first + rr;
        if (lane == 0 && m < mc && nl < a.N) {
          float* yp = y_row(a, g, r_begin + m0 + m) + nl;
          if (scaled) v *= out_scale;
          *yp = a.accumulate ? *yp + v : v;
        }
      }
  }
}

template <WeightFormat F>
__global__ void __launch_bounds__(kSkWarps * 32) gemm_skinny_kernel(const GemmArgs a) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ float4 xs4[];
  skinny_block<F>(a, blockIdx.x, false, 1.0f, reinterpret_cast<float*>(xs4));
}

// Several weights over the same x (GemmSegments): block x belongs to the last segment whose block0 <= x; that
// segment's weight, N, y and scale replace a's. Every segment's rows are computed as the plain kernel computes them.
template <WeightFormat F>
__global__ void __launch_bounds__(kSkWarps * 32) gemm_skinny_segments_kernel(const GemmArgs a, const GemmSegments s) {
  dsinfer::cuda::pdl_wait_then_release();
  extern __shared__ float4 xs4[];
  int i = 0;
  while (i + 1 < s.count && int(blockIdx.x) >= s.seg[i + 1].block0) ++i;
  const GemmSegmentArgs& sg = s.seg[i];
  GemmArgs b = a;
  b.wdata = sg.wdata;
  b.wscale = sg.wscale;
  b.N = sg.N;
  b.y = sg.y;
  b.ldy = sg.ldy;
  skinny_block<F>(b, int64_t(blockIdx.x) - sg.block0, sg.scaled, sg.out_scale, reinterpret_cast<float*>(xs4));
}

template <WeightFormat F>
void launch(const GemmArgs& a, cudaStream_t s) {
  constexpr size_t smem = SkFmt<F>::kSmem;
  if (smem > 48 * 1024)  // a failure here surfaces as the launch error the caller checks
    cudaFuncSetAttribute(gemm_skinny_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const int64_t rows_per_block = int64_t(kSkWarps) * kSkRowsPerWarp;
  const dim3 grid(unsigned((a.N + rows_per_block - 1) / rows_per_block), unsigned(a.groups));
  dsinfer::cuda::pdl_launch(gemm_skinny_kernel<F>, grid, dim3(kSkWarps * 32), smem, s, a);
}

template <WeightFormat F>
int launch_segments(const GemmArgs& a, const GemmSegments& sg, cudaStream_t s) {
  constexpr size_t smem = SkFmt<F>::kSmem;
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(gemm_skinny_segments_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const dim3 grid(unsigned(sg.blocks), 1u);
  return int(dsinfer::cuda::pdl_launch(gemm_skinny_segments_kernel<F>, grid, dim3(kSkWarps * 32), smem, s, a, sg));
}

}  // namespace

int64_t gemm_skinny_rows_per_block() { return int64_t(kSkWarps) * kSkRowsPerWarp; }

int launch_gemm_skinny_segments(WeightFormat f, const GemmArgs& a, const GemmSegments& sg, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (f) {
    case WeightFormat::F32: return launch_segments<WeightFormat::F32>(a, sg, s);
    case WeightFormat::BF16: return launch_segments<WeightFormat::BF16>(a, sg, s);
    case WeightFormat::FP8_BLOCK: return launch_segments<WeightFormat::FP8_BLOCK>(a, sg, s);
    case WeightFormat::FP4_G32: return launch_segments<WeightFormat::FP4_G32>(a, sg, s);
  }
  return int(cudaErrorInvalidValue);
}

void launch_gemm_skinny(WeightFormat f, const GemmArgs& a, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (f) {
    case WeightFormat::F32: return launch<WeightFormat::F32>(a, s);
    case WeightFormat::BF16: return launch<WeightFormat::BF16>(a, s);
    case WeightFormat::FP8_BLOCK: return launch<WeightFormat::FP8_BLOCK>(a, s);
    case WeightFormat::FP4_G32: return launch<WeightFormat::FP4_G32>(a, s);
  }
}

}  // namespace dsinfer::ops::cuda::detail
