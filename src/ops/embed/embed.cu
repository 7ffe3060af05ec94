// CUDA embedding kernel (see embed_cuda.h): one block per token, each channel read once and written n times.
#include <cuda_runtime.h>

#include "core/small_float.h"
#include "cuda/pdl.cuh"
#include "ops/embed/embed_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
__global__ void embed_kernel(const void* table, EmbedDType dt, int64_t vocab, int64_t dim, const int32_t* tokens,
                             int n, float* X) {
  dsinfer::cuda::pdl_wait_then_release();
  const int64_t t = blockIdx.x;
  const int64_t tok = tokens[t];
  const bool ok = tok >= 0 && tok < vocab;
  float* x = X + t * n * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float v = __int_as_float(0x7fc00000);  // NaN
    if (ok) {
      if (dt == EmbedDType::F32)
        v = static_cast<const float*>(table)[tok * dim + d];
      else
        v = small_float::from_bits(small_float::bf16_f32_bits(static_cast<const uint16_t*>(table)[tok * dim + d]));
    }
    for (int j = 0; j < n; ++j) x[j * dim + d] = v;
  }
}
}  // namespace

void launch_embed(const void* table, EmbedDType dt, int64_t vocab, int64_t dim, const int32_t* tokens, int64_t T,
                  int64_t n, float* X, void* stream) {
  dsinfer::cuda::pdl_launch(embed_kernel, dim3(unsigned(T)), dim3(256), 0, static_cast<cudaStream_t>(stream), table, dt,
                            vocab, dim, tokens, int(n), X);
}

}  // namespace dsinfer::ops::cuda::detail
