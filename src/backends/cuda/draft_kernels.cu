// Small kernels of the CUDA drafters (see draft_kernels_launch.h): the window attention with explicit key ranges,
// the hc-stream mean of captured target rows, the ring scatter and a broadcast row add. Simple one-block-per-row
// kernels: the drafter's tensors are small (tens to hundreds of rows).
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/draft_kernels_launch.h"

namespace dsinfer::backends::detail {

namespace {

constexpr int kAttnThreads = 128;

// One block per (token, head). Scores in double like sparse_attention_ref; softmax with the sink in the
// denominator; then every thread owns output channels.
__global__ void draft_attention_kernel(DraftAttnArgs a) {
  extern __shared__ double smem[];
  const int64_t t = blockIdx.x, h = blockIdx.y, dim = a.dim;
  const DraftKeys k = a.keys[t];
  const int64_t nring = k.ring_hi > k.ring_lo ? k.ring_hi - k.ring_lo : 0;
  const int64_t nnew = k.new_hi > k.new_lo ? k.new_hi - k.new_lo : 0;
  const int64_t n = min(nring + nnew, a.max_keys);
  double* s = smem;                 // [max_keys]
  double* red = smem + a.max_keys;  // [2]: max, denominator
  const float* q = a.q + (t * a.heads + h) * dim;
  auto key = [&](int64_t j) -> const float* {
    if (j < nring) return a.ring + int64_t(k.slot) * a.slot_stride + ((k.ring_lo + j) % a.window) * dim;
    return a.kv + (k.new_lo + (j - nring)) * dim;
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t j = warp; j < n; j += warps) {
    const float* kr = key(j);
    double dot = 0.0;
    for (int64_t i = lane; i < dim; i += 32) dot += double(q[i]) * double(kr[i]);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) s[j] = dot * double(a.scale);
  }
  __syncthreads();
  if (warp == 0) {
    const double sink = double(a.sinks[h]);
    double mx = sink;
    for (int64_t j = lane; j < n; j += 32) mx = fmax(mx, s[j]);
    for (int o = 16; o > 0; o /= 2) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double den = 0.0;
    for (int64_t j = lane; j < n; j += 32) {
      s[j] = exp(s[j] - mx);
      den += s[j];
    }
    for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) red[1] = den + exp(sink - mx);
  }
  __syncthreads();
  const double den = red[1];
  float* out = a.out + (t * a.heads + h) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += s[j] * double(key(j)[i]);
    out[i] = float(acc / den);
  }
}

__global__ void stream_mean_kernel(const float* hidden, const int32_t* rows, int64_t layers, int64_t n, int64_t dim,
                                   float* feats) {
  const int64_t t = blockIdx.x;
  const float* src = hidden + int64_t(rows[t]) * layers * n * dim;
  for (int64_t idx = threadIdx.x; idx < layers * dim; idx += blockDim.x) {
    const int64_t l = idx / dim, d = idx % dim;
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) s += src[(l * n + j) * dim + d];
    feats[t * layers * dim + idx] = s / float(n);
  }
}

__global__ void ring_scatter_kernel(const float* kv, const int32_t* slot, const int64_t* pos, int64_t dim, float* ring,
                                    int64_t slot_stride, int64_t window) {
  const int64_t t = blockIdx.x;
  float* dst = ring + int64_t(slot[t]) * slot_stride + (pos[t] % window) * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = kv[t * dim + i];
}

__global__ void add_rows_kernel(const float* b, int64_t rep, int64_t dim, float* y) {
  const int64_t t = blockIdx.x;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[t * dim + i] += b[(t / rep) * dim + i];
}

}  // namespace

void launch_draft_attention(const DraftAttnArgs& a, void* stream) {
  const size_t smem = size_t(a.max_keys + 2) * sizeof(double);
  draft_attention_kernel<<<dim3(unsigned(a.T), unsigned(a.heads)), kAttnThreads, smem, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_stream_mean(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream) {
  stream_mean_kernel<<<unsigned(T), 256, 0, static_cast<cudaStream_t>(stream)>>>(hidden, rows, layers, n, dim, feats);
}

void launch_ring_scatter(const float* kv, const int32_t* slot, const int64_t* pos, int64_t T, int64_t dim, float* ring,
                         int64_t slot_stride, int64_t window, void* stream) {
  ring_scatter_kernel<<<unsigned(T), 128, 0, static_cast<cudaStream_t>(stream)>>>(kv, slot, pos, dim, ring, slot_stride, window);
}

void launch_add_rows(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream) {
  add_rows_kernel<<<unsigned(T), 256, 0, static_cast<cudaStream_t>(stream)>>>(b, rep, dim, y);
}

}  // namespace dsinfer::backends::detail
