// Argument checks and launch of the CUDA head norm + RoPE (see rope_cuda.h).
#include "ops/rope/rope_cuda.h"

#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/rope/rope_launch.h"

namespace dsinfer::ops::cuda {

Status head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream) {
  if (p.rows < 0 || p.heads <= 0 || p.dim <= 0 || p.dim % 4 != 0)
    return Status::errorf("head_norm_rope: bad shape rows={} heads={} dim={} (dim must be a positive multiple of 4)",
                          p.rows, p.heads, p.dim);
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim)
    return Status::errorf("head_norm_rope: rope_dim {} must be even and <= dim {}", p.rope_dim, p.dim);
  if (p.rope_dim > 0 && !p.inv_freq) return Status::error("head_norm_rope: rope_dim > 0 needs inv_freq");
  if (p.norm == HeadNorm::Weighted && !p.norm_w) return Status::error("head_norm_rope: weighted norm without weights");
  if (p.rows == 0) return Status::ok();
  if (!x || !pos) return Status::error("head_norm_rope: null x or pos");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return Status::error("head_norm_rope: x must be 16-byte aligned");
  const int64_t vecs = p.rows * p.heads, blocks = (vecs + 7) / 8;
  if (blocks > 0x7fffffff) return Status::errorf("head_norm_rope: {} vectors exceed the grid limit", vecs);
  detail::launch_head_norm_rope(p, x, pos, stream);
  DSI_CUDA_LAUNCHED("head_norm_rope_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
