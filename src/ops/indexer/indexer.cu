// CUDA Lightning Indexer kernels (see indexer_cuda.h).
#include "cuda/ops_device.cuh"
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
    if (j0 + r < N && v.fp8) {  // FP8 state: the key's codes and scale (exact in fp32)
      float e[4];
      idx_decode4(reinterpret_cast<const uint8_t*>(v.blocks), v.index_key_pages(), v.entry_index(table, j0 + r), c, e);
      val = make_float4(e[0], e[1], e[2], e[3]);
    } else if (j0 + r < N) {
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

// Order-preserving map of a float score to uint32 (larger score -> larger key); -0.0 maps like +0.0.
__device__ __forceinline__ uint32_t score_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block (blockDim.x == 1024); returns this thread's offset, *total the sum.
__device__ int block_exclusive_scan(int x, int* total) {
  __shared__ int warp_tot[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = x;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  int base = 0, all = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) {
    if (w < warp) base += warp_tot[w];
    all += warp_tot[w];
  }
  *total = all;
  return base + incl - x;
}

__global__ void __launch_bounds__(1024) indexer_select_kernel(StepDevice st, IndexerCudaParams p, const float* scores,
                                                              int64_t max_visible, int32_t* out) {
  const int64_t t = blockIdx.x, N = visible(st.pos[t], p.m, max_visible), K = p.topk;
  int32_t* o = out + t * K;
  if (N <= K) {  // everything visible is selected
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) o[i] = i < N ? int32_t(i) : -1;
    return;
  }
  const float* sc = scores + t * max_visible;
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_k;
  uint32_t prefix = 0, mask = 0, kr = uint32_t(K);  // kr: rank (1-based) still to find among keys matching prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const uint32_t u = score_key(sc[j]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t cum = 0;
      for (int b = 255; b >= 0; --b) {
        if (cum + hist[b] >= kr) {
          s_prefix = prefix | (uint32_t(b) << shift);
          s_k = kr - cum;
          break;
        }
        cum += hist[b];
      }
    }
    __syncthreads();
    prefix = s_prefix;
    kr = s_k;
    mask |= 255u << shift;
  }
  // prefix = key of the K-th largest score; take every larger key and the kr lowest-index keys equal to it.
  const uint32_t tau = prefix;
  const int64_t per = (N + blockDim.x - 1) / blockDim.x;
  const int64_t b0 = min(N, int64_t(threadIdx.x) * per), b1 = min(N, b0 + per);
  int gt = 0, eq = 0;
  for (int64_t j = b0; j < b1; ++j) {
    const uint32_t u = score_key(sc[j]);
    gt += u > tau;
    eq += u == tau;
  }
  int total = 0;
  const int eq_base = block_exclusive_scan(eq, &total);
  const int take_eq = min(eq, max(0, int(kr) - eq_base));
  int out_base = block_exclusive_scan(gt + take_eq, &total);
  int eq_seen = 0;
  for (int64_t j = b0; j < b1; ++j) {
    const uint32_t u = score_key(sc[j]);
    bool take = u > tau;
    if (u == tau) take = eq_seen++ < take_eq;
    if (take) o[out_base++] = int32_t(j);
  }
}
}  // namespace

void launch_indexer_scores(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p,
                           const float* q, const float* weights, int64_t max_visible, float* scores, void* stream) {
  const size_t smem = size_t(p.heads * p.dim + kKB * (p.dim + 4)) * sizeof(float);
  cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const dim3 grid(unsigned(step.T), unsigned((max_visible + kKB - 1) / kKB));
  indexer_scores_kernel<<<grid, kKB * kGroups, smem, static_cast<cudaStream_t>(stream)>>>(step, view, p, q, weights,
                                                                                         max_visible, scores);
}

void launch_indexer_select(const StepDevice& step, const IndexerCudaParams& p, const float* scores, int64_t max_visible,
                           int32_t* out, void* stream) {
  indexer_select_kernel<<<unsigned(step.T), 1024, 0, static_cast<cudaStream_t>(stream)>>>(step, p, scores, max_visible,
                                                                                        out);
}

}  // namespace dsinfer::ops::cuda::detail
