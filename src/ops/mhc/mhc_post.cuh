// Device side of hc_post's arithmetic, shared by hc_post_kernel (mhc.cu) and hc_post_mix_kernel (mhc_mix.cu), so that
// both write the same bits. Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

namespace dsinfer::ops::cuda::detail {

// Stream k of one token at four columns after hc_post: post[k] * f + sum_j comb[j * n + k] * X_j, accumulated in
// double in hc_post_ref's order (the post term first, then j = 0..n-1) and rounded once to fp32. old: the token's n
// old streams at these columns (kN >= n slots), post / comb: the token's coefficients.
template <int kN>
__device__ __forceinline__ float4 hc_post_stream4(int k, int n, const float4 (&old)[kN], float4 fv,
                                                  const float* post, const float* comb) {
  const double pk = post[k];
  double a0 = pk * double(fv.x), a1 = pk * double(fv.y), a2 = pk * double(fv.z), a3 = pk * double(fv.w);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    if (j >= n) break;
    const double cj = comb[j * n + k];
    a0 += cj * double(old[j].x);
    a1 += cj * double(old[j].y);
    a2 += cj * double(old[j].z);
    a3 += cj * double(old[j].w);
  }
  return make_float4(float(a0), float(a1), float(a2), float(a3));
}

}  // namespace dsinfer::ops::cuda::detail
