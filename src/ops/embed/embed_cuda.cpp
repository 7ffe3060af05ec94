// Argument checks and launch of the CUDA embedding (see embed_cuda.h).
#include "ops/embed/embed_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Status embed(const void* table, EmbedDType dt, int64_t vocab, int64_t dim, const int32_t* tokens, int64_t T, int64_t n,
             float* X, void* stream) {
  if (vocab <= 0 || dim <= 0 || n <= 0 || T < 0 || T > 0x7fffffff)
    return Status::errorf("embed: bad shape vocab={} dim={} n={} T={}", vocab, dim, n, T);
  if (T == 0) return Status::ok();
  if (!table || !tokens || !X) return Status::error("embed: null table, tokens or output");
  detail::launch_embed(table, dt, vocab, dim, tokens, T, n, X, stream);
  DSI_CUDA_LAUNCHED("embed_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
