// Parameters and kernel launchers behind mhc_cuda.h (no CUDA types, no Status; validated by mhc_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

// One mHC site (or the head) plus the RMSNorm that follows it. Device pointers.
struct HcNormParams {
  const float* fn = nullptr;     // [(2+n)*n, n*dim] (hc_head: [n, n*dim])
  const float* base = nullptr;   // [(2+n)*n]        (hc_head: [n])
  const float* scale = nullptr;  // [3]              (hc_head: [1])
  int64_t n = 4, dim = 0, sinkhorn_iters = 20;
  float hc_eps = 1e-6f, rms_eps = 1e-6f;  // rms_eps: the mixing RMS and the following norm (rms_norm_eps)
  const float* norm_w = nullptr;  // [dim] weights of the norm after the collapse (attn_norm / ffn_norm / norm)
};

namespace detail {
inline constexpr int kHcMaxN = 8;
void launch_hc_pre_norm(const HcNormParams& p, const float* X, int64_t T, float* y, float* post, float* comb,
                        void* stream);
void launch_hc_post(int64_t T, int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* X,
                    void* stream);
void launch_hc_head_norm(const HcNormParams& p, const float* X, const int32_t* rows, int64_t R, float* y, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
