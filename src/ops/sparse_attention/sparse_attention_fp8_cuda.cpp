// Argument checks and launches of the FP8-state sparse attention decode (see sparse_attention_fp8_cuda.h).
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
Status check_source(const Fp8KeySource& s, int i) {
  if (!s.idx) return Status::ok();
  if (!s.cache) return Status::errorf("sparse_attention_fp8: key list {} has indices but no cache", i);
  if (s.rows < 0 || s.rows > 0x7fffffff) return Status::errorf("sparse_attention_fp8: key list {} rows {}", i, s.rows);
  if (s.stride <= 0 || s.stride > 0x7fffffff)
    return Status::errorf("sparse_attention_fp8: key list {} stride {}", i, s.stride);
  if (reinterpret_cast<uintptr_t>(s.cache) % 16 != 0)
    return Status::errorf("sparse_attention_fp8: the cache of key list {} is not 16-byte aligned", i);
  return Status::ok();
}
}  // namespace

Status sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                            void* stream) {
  if (p.T < 0 || p.T > 0x7fffffff) return Status::errorf("sparse_attention_fp8: bad token count {}", p.T);
  if (p.heads <= 0 || p.heads > 65535 * detail::kFp8Heads)
    return Status::errorf("sparse_attention_fp8: bad head count {}", p.heads);
  if (!p.sinks) return Status::error("sparse_attention_fp8: null sinks");
  if (!p.keys[0].idx && p.keys[1].idx) return Status::error("sparse_attention_fp8: key list 1 without key list 0");
  DSI_RETURN_IF_ERROR(check_source(p.keys[0], 0));
  DSI_RETURN_IF_ERROR(check_source(p.keys[1], 1));
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > 512 || (p.rope_dim > 0 && (!p.inv_freq || !p.pos)))
    return Status::errorf("sparse_attention_fp8: bad rope_dim {} (even, <= 512, with inv_freq and pos)", p.rope_dim);
  if (p.num_splits < 1 || p.num_splits > 65535)
    return Status::errorf("sparse_attention_fp8: num_splits {}", p.num_splits);
  if (p.num_splits > 1 && !workspace) return Status::error("sparse_attention_fp8: num_splits > 1 needs a workspace");
  if (p.T == 0) return Status::ok();
  if (!q || !o) return Status::error("sparse_attention_fp8: null q or output");
  detail::launch_sparse_attention_fp8(p, q, o, workspace, stream);
  DSI_CUDA_LAUNCHED("sparse_attention_fp8_kernel");
  if (p.num_splits > 1) {
    detail::launch_sparse_attention_fp8_combine(p, workspace, o, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_combine_kernel");
  }
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
