// CUDA sparse attention kernels (see sparse_attention_cuda.h for the layout and parallelisation).
#include "cuda/func_smem.h"
#include "ops/sparse_attention/sparse_attention_keys.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = kAttnWarps * 32;
constexpr int KT = kAttnTile;

template <int OFF>
__device__ __forceinline__ void scatter_stage(float (&v)[16], int lane) {
  const bool upper = (lane & OFF) != 0;
#pragma unroll
  for (int i = 0; i < OFF; ++i) {
    const float send = upper ? v[i] : v[i + OFF];
    const float keep = upper ? v[i + OFF] : v[i];
    v[i] = keep + __shfl_xor_sync(dev::kFull, send, OFF);
  }
}

// Sum of v[0..15] over all 32 lanes, scattered: afterwards lane l returns the total of value (l & 15).
// Stage OFF keeps, in lanes with bit OFF set, the upper half of the remaining values, so after the stages
// 8, 4, 2, 1 lane l holds value (l & 15).
__device__ __forceinline__ float reduce_scatter16(float (&v)[16]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] += __shfl_xor_sync(dev::kFull, v[i], 16);
  scatter_stage<8>(v, lane);
  scatter_stage<4>(v, lane);
  scatter_stage<2>(v, lane);
  scatter_stage<1>(v, lane);
  return v[0];
}

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The kernel's epilogue: with one split, normalise with the sink, apply the inverse RoPE and write o; with
// several, write this split's unnormalised accumulator and its (max, sum) for attention_combine_kernel.
template <int NCH, int HPW>
__device__ __forceinline__ void write_result(const float4 (&acc)[HPW][NCH], const float (&mrun)[HPW],
                                             const float (&lrun)[HPW], int64_t h0, int64_t t, int64_t split,
                                             const SparseAttentionCudaParams& prm, int64_t pos, float* o, float* ws) {
  const int lane = threadIdx.x & 31;
  const int64_t H = prm.heads, hd = prm.head_dim, hd4 = hd / 4, splits = prm.num_splits;
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    const int64_t h = h0 + hh;
    if (h >= H) continue;
    if (splits == 1 && prm.split_keys == 0) {
      const float sink = prm.sinks[h], M = fmaxf(mrun[hh], sink);
      const float em = expf(mrun[hh] - M);
      const float f = em / (lrun[hh] * em + expf(sink - M));
#pragma unroll
      for (int i = 0; i < NCH; ++i) {
        const int64_t c = lane + 32 * i;
        if (c >= hd4) continue;
        float e[4] = {acc[hh][i].x * f, acc[hh][i].y * f, acc[hh][i].z * f, acc[hh][i].w * f};
        out_rope(e, 4 * c, prm, pos);
        reinterpret_cast<float4*>(o + (t * H + h) * hd)[c] = make_float4(e[0], e[1], e[2], e[3]);
      }
    } else {
      float* part = ws + ((t * splits + split) * H + h) * (hd + 2);
#pragma unroll
      for (int i = 0; i < NCH; ++i) {
        const int64_t c = lane + 32 * i;
        if (c < hd4) {
          part[4 * c + 0] = acc[hh][i].x;
          part[4 * c + 1] = acc[hh][i].y;
          part[4 * c + 2] = acc[hh][i].z;
          part[4 * c + 3] = acc[hh][i].w;
        }
      }
      if (lane == 0) {
        part[hd] = mrun[hh];
        part[hd + 1] = lrun[hh];
      }
    }
  }
}

template <int NCH, int HPW>
__global__ void __launch_bounds__(kThreads) sparse_attention_kernel(StepDevice st, LayerStateView v,
                                                                   SparseAttentionCudaParams prm, const float* q,
                                                                   const float* kv_new, float* o, float* ws) {
  extern __shared__ float4 attn_tile[];  // [KT][head_dim / 4]
  __shared__ const float* rowp[KT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x, H = prm.heads, hd = prm.head_dim, hd4 = hd / 4;
  const int64_t h0 = int64_t(blockIdx.y) * (kAttnWarps * HPW) + warp * HPW;
  const TokenKeys tk = token_keys(st, prm, t);
  const int64_t nkeys = tk.nwin + tk.ncomp, splits = prm.num_splits;
  // Fixed split size: splits past this token's keys write nothing (the combine reads only the token's own).
  if (prm.split_keys > 0 && int64_t(blockIdx.z) >= attn_token_splits(nkeys, splits, prm.split_keys)) return;
  int64_t kbeg, kend;
  attn_split_range(nkeys, blockIdx.z, splits, prm.split_keys, 1, kbeg, kend);

  float4 qr[HPW][NCH], acc[HPW][NCH];
  float mrun[HPW], lrun[HPW];
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    mrun[hh] = -INFINITY;
    lrun[hh] = 0.0f;
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      const int64_t c = lane + 32 * i, h = h0 + hh;
      acc[hh][i] = make_float4(0.f, 0.f, 0.f, 0.f);
      qr[hh][i] = (h < H && c < hd4) ? reinterpret_cast<const float4*>(q + (t * H + h) * hd)[c] : acc[hh][i];
    }
  }

  for (int64_t kb = kbeg; kb < kend; kb += KT) {
    __syncthreads();  // the previous tile is fully consumed
    if (threadIdx.x < KT) {
      const int64_t idx = kb + threadIdx.x;
      rowp[threadIdx.x] = idx < kend ? key_row(tk, v, prm, kv_new, t, idx) : nullptr;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < KT * hd4; i += kThreads) {
      const int64_t r = i / hd4, c = i % hd4;
      const float* src = rowp[r];
      attn_tile[r * hd4 + c] = src ? reinterpret_cast<const float4*>(src)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();

    // scores: lane l ends with key l of the tile for each of its heads
    float sc[HPW];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float part[HPW][16];
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh)
#pragma unroll
        for (int jj = 0; jj < 16; ++jj) part[hh][jj] = 0.0f;
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        const float4* krow = attn_tile + (half * 16 + jj) * hd4;
#pragma unroll
        for (int i = 0; i < NCH; ++i) {
          const int64_t c = lane + 32 * i;
          if (c < hd4) {
            const float4 k4 = krow[c];
#pragma unroll
            for (int hh = 0; hh < HPW; ++hh) part[hh][jj] += dot4(qr[hh][i], k4);
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) {
        const float r = reduce_scatter16(part[hh]);
        if ((lane >> 4) == half) sc[hh] = r;
      }
    }
    const bool valid = rowp[lane] != nullptr;
#pragma unroll
    for (int hh = 0; hh < HPW; ++hh) {
      const float s = valid ? sc[hh] * prm.scale : -INFINITY;
      const float mnew = fmaxf(mrun[hh], dev::warp_max(s));
      float pj = 0.0f, alpha = 1.0f;
      if (mnew != -INFINITY) {  // warp-uniform
        alpha = expf(mrun[hh] - mnew);
        pj = expf(s - mnew);
      }
      lrun[hh] = lrun[hh] * alpha + dev::warp_sum(pj);
      mrun[hh] = mnew;
      sc[hh] = pj;
#pragma unroll
      for (int i = 0; i < NCH; ++i) {
        acc[hh][i].x *= alpha;
        acc[hh][i].y *= alpha;
        acc[hh][i].z *= alpha;
        acc[hh][i].w *= alpha;
      }
    }
    // o += p_j * k_j
    for (int j = 0; j < KT; ++j) {
      if (rowp[j] == nullptr) continue;  // block-uniform
      float pj[HPW];
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) pj[hh] = __shfl_sync(dev::kFull, sc[hh], j);
      const float4* krow = attn_tile + j * hd4;
#pragma unroll
      for (int i = 0; i < NCH; ++i) {
        const int64_t c = lane + 32 * i;
        if (c < hd4) {
          const float4 k4 = krow[c];
#pragma unroll
          for (int hh = 0; hh < HPW; ++hh) {
            acc[hh][i].x += pj[hh] * k4.x;
            acc[hh][i].y += pj[hh] * k4.y;
            acc[hh][i].z += pj[hh] * k4.z;
            acc[hh][i].w += pj[hh] * k4.w;
          }
        }
      }
    }
  }

  write_result<NCH, HPW>(acc, mrun, lrun, h0, t, blockIdx.z, prm, tk.p, o, ws);
}

__global__ void attention_combine_kernel(StepDevice st, SparseAttentionCudaParams prm, const float* ws, float* o) {
  const int64_t t = blockIdx.x, h = blockIdx.y, H = prm.heads, hd = prm.head_dim, S = prm.num_splits;
  const float* base = ws + (t * S * H + h) * (hd + 2);  // split s at base + s * H * (hd + 2)
  const int64_t sstride = H * (hd + 2);
  // Fixed split size: only the token's own splits, in order (independent of the step's num_splits).
  int64_t St = S;
  if (prm.split_keys > 0) {
    const TokenKeys tk = token_keys(st, prm, t);
    St = attn_token_splits(tk.nwin + tk.ncomp, S, prm.split_keys);
  }
  const float sink = prm.sinks[h];
  float M = sink;
  for (int64_t s = 0; s < St; ++s) M = fmaxf(M, base[s * sstride + hd]);
  float den = expf(sink - M);
  for (int64_t s = 0; s < St; ++s) den += base[s * sstride + hd + 1] * expf(base[s * sstride + hd] - M);
  const int64_t p = st.pos[t];
  for (int64_t d4 = threadIdx.x; d4 < hd / 4; d4 += blockDim.x) {
    float e[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t s = 0; s < St; ++s) {
      const float* ps = base + s * sstride;
      const float w = expf(ps[hd] - M);  // 0 for an empty split (max -inf)
#pragma unroll
      for (int k = 0; k < 4; ++k) e[k] += ps[4 * d4 + k] * w;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) e[k] /= den;
    out_rope(e, 4 * d4, prm, p);
    reinterpret_cast<float4*>(o + (t * H + h) * hd)[d4] = make_float4(e[0], e[1], e[2], e[3]);
  }
}

// The fast mode's combine (tensor-core kernel, no fixed split size, S <= kFastCombineSplits): thread s reads split
// s's (max, sum), so the block waits for one load instead of 2 S dependent ones; the weights exp(m_s - M) go through
// shared memory and each thread merges 4 dims of every split with loads in flight (float2: a partial row of hd + 2
// floats is only 8-byte aligned). Sums in a fixed order (warp trees, then warps 0..3): deterministic, and the same
// for a token whatever the batch. Exact and batch-invariant modes keep attention_combine_kernel.
constexpr int kCombineThreads = 128;
static_assert(kFastCombineSplits <= kCombineThreads, "one split per thread");

__global__ void __launch_bounds__(kCombineThreads)
    attention_combine_fast_kernel(StepDevice st, SparseAttentionCudaParams prm, const float* ws, float* o) {
  __shared__ float wsh[kCombineThreads], red[kCombineThreads / 32];
  const int64_t t = blockIdx.x, h = blockIdx.y, H = prm.heads, hd = prm.head_dim, S = prm.num_splits;
  const int64_t sstride = H * (hd + 2);
  const float* base = ws + (t * S * H + h) * (hd + 2);  // split s at base + s * sstride
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float ms = tid < S ? base[tid * sstride + hd] : -INFINITY;
  const float ls = tid < S ? base[tid * sstride + hd + 1] : 0.0f;
  const float wmax = dev::warp_max(ms);
  if (lane == 0) red[warp] = wmax;
  __syncthreads();
  const float sink = prm.sinks[h];
  const float M = fmaxf(fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])), sink);  // finite: the sink is
  const float w = tid < S ? expf(ms - M) : 0.0f;                                      // 0 for an empty split
  const float wsum = dev::warp_sum(ls * w);
  __syncthreads();  // every thread has read red[]
  wsh[tid] = w;
  if (lane == 0) red[warp] = wsum;
  __syncthreads();
  const float inv = 1.0f / (expf(sink - M) + ((red[0] + red[1]) + (red[2] + red[3])));
  const int64_t p = st.pos[t];
  for (int64_t d4 = tid; d4 < hd / 4; d4 += kCombineThreads) {
    float e[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
    for (int64_t s = 0; s < S; ++s) {
      const float2* src = reinterpret_cast<const float2*>(base + s * sstride + 4 * d4);
      const float2 a = src[0], b = src[1];
      const float ww = wsh[s];
      e[0] += a.x * ww;
      e[1] += a.y * ww;
      e[2] += b.x * ww;
      e[3] += b.y * ww;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) e[k] *= inv;
    out_rope(e, 4 * d4, prm, p);
    reinterpret_cast<float4*>(o + (t * H + h) * hd)[d4] = make_float4(e[0], e[1], e[2], e[3]);
  }
}

__global__ void ring_write_kernel(StepDevice st, LayerStateView v, const float* kv_new) {
  const int64_t t = blockIdx.x, pos = st.pos[t];
  const int32_t s = st.seq_of_token[t];
  const int64_t end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
  if (pos < end - v.ring_rows) return;  // a later token of the chunk owns this ring row
  float* dst = v.ring_row(st.slot[s], pos);
  for (int64_t i = threadIdx.x; i < v.head_dim; i += blockDim.x) dst[i] = kv_new[t * v.head_dim + i];
}

template <int NCH, int HPW>
void launch_variant(const StepDevice& st, const LayerStateView& v, const SparseAttentionCudaParams& p, const float* q,
                    const float* kv_new, float* o, float* ws, cudaStream_t stream) {
  const size_t smem = size_t(KT) * size_t(p.head_dim) * sizeof(float);
  // smem follows head_dim: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h).
  dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(sparse_attention_kernel<NCH, HPW>), smem);
  const dim3 grid(unsigned(st.T), unsigned((p.heads + kAttnWarps * HPW - 1) / (kAttnWarps * HPW)),
                  unsigned(p.num_splits));
  sparse_attention_kernel<NCH, HPW><<<grid, kThreads, smem, stream>>>(st, v, p, q, kv_new, o, ws);
}
}  // namespace

int attn_heads_per_warp(int64_t heads) { return heads >= 16 ? 2 : 1; }

void launch_sparse_attention(const StepDevice& step, const LayerStateView& view, const SparseAttentionCudaParams& p,
                             const float* q, const float* kv_new, float* o, float* workspace, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t chunks = (p.head_dim / 4 + 31) / 32;  // float4 chunks per lane: 1, 2 or 4
  const bool two = attn_heads_per_warp(p.heads) == 2;
  if (chunks == 1)
    two ? launch_variant<1, 2>(step, view, p, q, kv_new, o, workspace, s)
        : launch_variant<1, 1>(step, view, p, q, kv_new, o, workspace, s);
  else if (chunks == 2)
    two ? launch_variant<2, 2>(step, view, p, q, kv_new, o, workspace, s)
        : launch_variant<2, 1>(step, view, p, q, kv_new, o, workspace, s);
  else
    two ? launch_variant<4, 2>(step, view, p, q, kv_new, o, workspace, s)
        : launch_variant<4, 1>(step, view, p, q, kv_new, o, workspace, s);
}

void launch_attention_combine(const StepDevice& step, const SparseAttentionCudaParams& p, const float* workspace,
                              float* o, void* stream) {
  const dim3 grid(unsigned(step.T), unsigned(p.heads));
  if (attn_fast_combine(p))
    attention_combine_fast_kernel<<<grid, kCombineThreads, 0, static_cast<cudaStream_t>(stream)>>>(step, p, workspace,
                                                                                                  o);
  else
    attention_combine_kernel<<<grid, 128, 0, static_cast<cudaStream_t>(stream)>>>(step, p, workspace, o);
}

void launch_ring_write(const StepDevice& step, const LayerStateView& view, const float* kv_new, void* stream) {
  ring_write_kernel<<<unsigned(step.T), 128, 0, static_cast<cudaStream_t>(stream)>>>(step, view, kv_new);
}

}  // namespace dsinfer::ops::cuda::detail
