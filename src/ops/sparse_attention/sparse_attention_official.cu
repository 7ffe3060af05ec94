// The official sparse_attn kernel's arithmetic for DeepSeek-V4.1 official numerics (p.official; CPU reference:
// model/deepseek_v41_attention.cpp sparse_attention_official): the token's keys in list order (window oldest first,
// then the indexer's picks; missing picks skipped) in blocks of 64, fp32 scores and an online softmax whose running
// max starts at -1e30, probabilities rounded to bf16 before P.V, the sink added to the denominator at the end, the
// output rounded to bf16, then the inverse RoPE of its trailing rope_dim channels, rounded to bf16 again. Exactness
// first: one block of 128 threads per (token, head), dot products and each block's P.V in double as the reference.
#include "ops/sparse_attention/sparse_attention_keys.cuh"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 128, kWarps = kThreads / 32, kBlockKeys = 64, kMaxCh = 512 / kThreads;
// The CPU reference's std::exp(float) (glibc: correctly rounded but for rare cases): the double exp rounded once.
__device__ __forceinline__ float exp_rn(float z) { return float(exp(double(z))); }

__global__ void __launch_bounds__(kThreads) sparse_attention_official_kernel(StepDevice st, LayerStateView v,
                                                                            SparseAttentionCudaParams prm,
                                                                            const float* q, const float* kv_new,
                                                                            float* o) {
  __shared__ const float* rows[kBlockKeys];
  __shared__ float s[kBlockKeys];
  __shared__ float out[512];
  __shared__ int s_count;
  __shared__ int64_t s_next;
  const int64_t t = blockIdx.x, h = blockIdx.y, hd = prm.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const TokenKeys tk = token_keys(st, prm, t);
  const int64_t nkeys = tk.nwin + tk.ncomp;
  const float* qh = q + (t * prm.heads + h) * hd;
  float acc[kMaxCh];
#pragma unroll
  for (int i = 0; i < kMaxCh; ++i) acc[i] = 0.0f;
  float mx = -1e30f, sum = 0.0f;
  int64_t next = 0;  // the key list's cursor (every thread keeps the same value)
  while (true) {
    __syncthreads();  // the previous block's rows and scores are consumed
    if (threadIdx.x == 0) {
      int c = 0;
      while (c < kBlockKeys && next < nkeys) {
        const float* r = key_row(tk, v, prm, kv_new, t, next++);
        if (r) rows[c++] = r;
      }
      s_count = c;
      s_next = next;
    }
    __syncthreads();
    const int cnt = s_count;
    next = s_next;
    if (cnt == 0) break;
    for (int j = warp; j < cnt; j += kWarps) {
      double dot = 0.0;
      for (int64_t c = lane; c < hd; c += 32) dot += double(qh[c]) * double(rows[j][c]);
      dot = dev::warp_sum(dot);
      if (lane == 0) s[j] = __fmul_rn(float(dot), prm.scale);
    }
    __syncthreads();
    float bmax = mx;
    for (int j = 0; j < cnt; ++j) bmax = fmaxf(bmax, s[j]);
    const float rescale = exp_rn(mx - bmax);
    double psum = 0.0, pv[kMaxCh];
#pragma unroll
    for (int i = 0; i < kMaxCh; ++i) pv[i] = 0.0;
    for (int j = 0; j < cnt; ++j) {
      const float pj = exp_rn(s[j] - bmax);
      psum += pj;
      const double pb = dev::round_bf16(pj);
#pragma unroll
      for (int i = 0; i < kMaxCh; ++i) {
        const int64_t c = threadIdx.x + int64_t(i) * kThreads;
        if (c < hd) pv[i] += pb * double(rows[j][c]);
      }
    }
    sum = __fadd_rn(__fmul_rn(sum, rescale), float(psum));
#pragma unroll
    for (int i = 0; i < kMaxCh; ++i) acc[i] = __fadd_rn(__fmul_rn(acc[i], rescale), float(pv[i]));
    mx = bmax;
  }
  sum = __fadd_rn(sum, exp_rn(prm.sinks[h] - mx));
#pragma unroll
  for (int i = 0; i < kMaxCh; ++i) {
    const int64_t c = threadIdx.x + int64_t(i) * kThreads;
    if (c < hd) out[c] = dev::round_bf16(__fdiv_rn(acc[i], sum));
  }
  __syncthreads();
  for (int64_t d = hd - prm.rope_dim + 2 * int64_t(threadIdx.x); d < hd; d += 2 * kThreads) {
    float a = out[d], b = out[d + 1];
    out_rope_pair(a, b, d, prm, tk.p);
    out[d] = dev::round_bf16(a);
    out[d + 1] = dev::round_bf16(b);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < hd; c += kThreads) o[(t * prm.heads + h) * hd + c] = out[c];
}
}  // namespace

void launch_sparse_attention_official(const StepDevice& step, const LayerStateView& view,
                                      const SparseAttentionCudaParams& p, const float* q, const float* kv_new,
                                      float* o, void* stream) {
  sparse_attention_official_kernel<<<dim3(unsigned(step.T), unsigned(p.heads)), kThreads, 0,
                                     static_cast<cudaStream_t>(stream)>>>(step, view, p, q, kv_new, o);
}

}  // namespace dsinfer::ops::cuda::detail
