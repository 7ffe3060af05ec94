// CUDA mHC kernels (see mhc_cuda.h). hc_pre/hc_head: one block per token; the (2+n)*n mixes are dot products
// over the flattened n*dim streams (per-warp double partials, one barrier), thread 0 then runs the scalar part
// (sigmoids and the Sinkhorn iterations) in exactly the float op order of ops/mhc/mhc_ref.cpp, and the block
// collapses the streams into shared memory and normalises them.
#include "cuda/ops_device.cuh"
#include "ops/mhc/mhc_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 512;
constexpr int kMaxMixes = (2 + kHcMaxN) * kHcMaxN;

__device__ float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

// head = true: hc_head (n mixes -> pre only). x: [n*dim] of one token; y: [dim] output row.
template <bool kHead>
__device__ void hc_collapse_norm(const HcNormParams& p, const float* x, float* y, float* post, float* comb) {
  extern __shared__ float ybuf[];  // [dim]
  __shared__ double red[(kMaxMixes + 1) * 32];
  __shared__ float mu[kMaxMixes], pre[kHcMaxN], cm[kHcMaxN * kHcMaxN];
  const int n = int(p.n), rows = kHead ? n : (2 + n) * n;
  const int64_t len = p.n * p.dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t len4 = len / 4;
  {
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < len4; i += blockDim.x) {
      const float4 a = x4[i];
      ss += double(a.x) * a.x + double(a.y) * a.y + double(a.z) * a.z + double(a.w) * a.w;
    }
    ss = dev::warp_sum(ss);
    if (lane == 0) red[rows * 32 + warp] = ss;
  }
  for (int r = 0; r < rows; ++r) {
    const float4* f4 = reinterpret_cast<const float4*>(p.fn + int64_t(r) * len);
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < len4; i += blockDim.x) {
      const float4 a = x4[i], f = f4[i];
      acc += double(f.x) * a.x + double(f.y) * a.y + double(f.z) * a.z + double(f.w) * a.w;
    }
    acc = dev::warp_sum(acc);
    if (lane == 0) red[r * 32 + warp] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ss = 0.0;
    for (int w = 0; w < nw; ++w) ss += red[rows * 32 + w];
    const double rho = 1.0 / sqrt(ss / double(len) + double(p.rms_eps));
    for (int r = 0; r < rows; ++r) {
      double acc = 0.0;
      for (int w = 0; w < nw; ++w) acc += red[r * 32 + w];
      mu[r] = float(acc * rho);
    }
    if (kHead) {
      for (int j = 0; j < n; ++j) pre[j] = sigmoidf(mu[j] * p.scale[0] + p.base[j]) + p.hc_eps;
    } else {
      for (int j = 0; j < n; ++j) {
        pre[j] = sigmoidf(mu[j] * p.scale[0] + p.base[j]) + p.hc_eps;
        post[j] = 2.0f * sigmoidf(mu[n + j] * p.scale[1] + p.base[n + j]);
      }
      for (int j = 0; j < n; ++j) {  // row softmax over k, + eps
        float* row = cm + j * n;
        float mx = -INFINITY;
        for (int k = 0; k < n; ++k) {
          row[k] = mu[2 * n + j * n + k] * p.scale[2] + p.base[2 * n + j * n + k];
          mx = fmaxf(mx, row[k]);
        }
        float s = 0.0f;
        for (int k = 0; k < n; ++k) s += (row[k] = expf(row[k] - mx));
        for (int k = 0; k < n; ++k) row[k] = row[k] / s + p.hc_eps;
      }
      for (int it = 0; it < p.sinkhorn_iters; ++it) {
        if (it > 0)
          for (int j = 0; j < n; ++j) {  // row normalisation
            float s = 0.0f;
            for (int k = 0; k < n; ++k) s += cm[j * n + k];
            for (int k = 0; k < n; ++k) cm[j * n + k] /= (s + p.hc_eps);
          }
        for (int k = 0; k < n; ++k) {  // column normalisation
          float s = 0.0f;
          for (int j = 0; j < n; ++j) s += cm[j * n + k];
          for (int j = 0; j < n; ++j) cm[j * n + k] /= (s + p.hc_eps);
        }
      }
      for (int i = 0; i < n * n; ++i) comb[i] = cm[i];
    }
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) {
    double acc = 0.0;
    for (int j = 0; j < n; ++j) acc += double(pre[j]) * double(x[j * p.dim + d]);
    ybuf[d] = float(acc);
  }
  dev::smem_rmsnorm(ybuf, int(p.dim), p.norm_w, p.rms_eps);
  for (int64_t d = threadIdx.x; d < p.dim; d += blockDim.x) y[d] = ybuf[d];
}

__global__ void __launch_bounds__(kThreads) hc_pre_norm_kernel(HcNormParams p, const float* X, float* y, float* post,
                                                              float* comb) {
  const int64_t t = blockIdx.x;
  hc_collapse_norm<false>(p, X + t * p.n * p.dim, y + t * p.dim, post + t * p.n, comb + t * p.n * p.n);
}

__global__ void __launch_bounds__(kThreads) hc_head_norm_kernel(HcNormParams p, const float* X, const int32_t* rows,
                                                               float* y) {
  const int64_t r = blockIdx.x, t = rows[r];
  hc_collapse_norm<true>(p, X + t * p.n * p.dim, y + r * p.dim, nullptr, nullptr);
}

__global__ void hc_post_kernel(int64_t T, int n, int64_t dim, const float* f, const float* post, const float* comb,
                               float* X) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * dim) return;
  const int64_t t = i / dim, d = i % dim;
  float* x = X + t * n * dim + d;
  float old[kHcMaxN];
  for (int j = 0; j < n; ++j) old[j] = x[j * dim];
  const float* c = comb + t * n * n;
  for (int k = 0; k < n; ++k) {
    double acc = double(post[t * n + k]) * double(f[t * dim + d]);
    for (int j = 0; j < n; ++j) acc += double(c[j * n + k]) * double(old[j]);
    x[k * dim] = float(acc);
  }
}
}  // namespace

void launch_hc_pre_norm(const HcNormParams& p, const float* X, int64_t T, float* y, float* post, float* comb,
                        void* stream) {
  hc_pre_norm_kernel<<<unsigned(T), kThreads, size_t(p.dim) * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
      p, X, y, post, comb);
}

void launch_hc_head_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t R, float* y, void* stream) {
  hc_head_norm_kernel<<<unsigned(R), kThreads, size_t(p.dim) * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
      p, X, rows, y);
}

void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
                    void* stream) {
  const int64_t total = T * dim;
  hc_post_kernel<<<unsigned((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(T, int(n), dim, f, post,
                                                                                             comb, X);
}

}  // namespace dsinfer::ops::cuda::detail
