// Argument checks and launches of the CUDA sparse attention and ring write (see sparse_attention_cuda.h).
#include "ops/sparse_attention/sparse_attention_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
Status check_step(const StepDevice& st, const char* who) {
  if (st.T < 0 || st.T > 0x7fffffff) return Status::errorf("{}: bad token count {}", who, st.T);
  if (st.T > 0 && (!st.pos || !st.seq_of_token || !st.cu_seqlens || !st.start_pos || !st.slot || !st.block_tables))
    return Status::errorf("{}: null step array", who);
  return Status::ok();
}
}  // namespace

Status sparse_attention(const StepDevice& step, const LayerStateView& view, const SparseAttentionCudaParams& p,
                        const float* q, const float* kv_new, float* o, float* workspace, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(step, "sparse_attention"));
  if (p.heads <= 0 || p.head_dim <= 0 || p.head_dim % 4 != 0 || p.head_dim > 512)
    return Status::errorf("sparse_attention: heads {} / head_dim {} (multiple of 4, <= 512)", p.heads, p.head_dim);
  if (p.head_dim != view.head_dim)
    return Status::errorf("sparse_attention: head_dim {} but the state layout has {}", p.head_dim, view.head_dim);
  if (p.window <= 0 || view.ring_rows < p.window)
    return Status::errorf("sparse_attention: window {} needs ring_rows >= window (have {})", p.window, view.ring_rows);
  if (p.m < 0 || (p.m > 0 && (view.entries_offset < 0 || view.entries_per_block <= 0)))
    return Status::errorf("sparse_attention: ratio {} but the layer's state has no compressed entries", p.m);
  if (p.topk_idx && (p.m == 0 || p.topk <= 0))
    return Status::errorf("sparse_attention: an indexer list needs a compressed layer and topk > 0 (topk {})", p.topk);
  if (!p.sinks) return Status::error("sparse_attention: null sinks");
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.head_dim || (p.rope_dim > 0 && !p.inv_freq))
    return Status::errorf("sparse_attention: bad rope_dim {} (or no inv_freq)", p.rope_dim);
  if (p.tensor_cores && !sparse_attention_tc_supported(p.head_dim))
    return Status::errorf("sparse_attention: the tensor-core kernel needs head_dim {} (have {})", detail::kTcDim,
                          p.head_dim);
  if (p.num_splits < 1 || p.num_splits > 65535) return Status::errorf("sparse_attention: num_splits {}", p.num_splits);
  if (p.split_keys < 0 || p.split_keys % detail::kAttnTile != 0)
    return Status::errorf("sparse_attention: split_keys {} must be a multiple of {}", p.split_keys, detail::kAttnTile);
  if ((p.num_splits > 1 || p.split_keys > 0) && !workspace)
    return Status::error("sparse_attention: num_splits > 1 or split_keys > 0 needs a workspace");
  if (step.T == 0) return Status::ok();
  if (!q || !kv_new || !o) return Status::error("sparse_attention: null q, kv_new or output");
  if (p.official) {
    if (p.tensor_cores || p.num_splits != 1 || p.split_keys != 0 || p.heads > 65535)
      return Status::errorf("sparse_attention: the official kernel runs one split of fp32 (num_splits {}, split_keys "
                            "{}, tensor cores {}, heads {} <= 65535)", p.num_splits, p.split_keys, p.tensor_cores,
                            p.heads);
    detail::launch_sparse_attention_official(step, view, p, q, kv_new, o, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_official_kernel");
    return Status::ok();
  }
  if (p.tensor_cores) {
    detail::launch_sparse_attention_tc(step, view, p, q, kv_new, o, workspace, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_tc_kernel");
  } else {
    detail::launch_sparse_attention(step, view, p, q, kv_new, o, workspace, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_kernel");
  }
  if (p.num_splits > 1 || p.split_keys > 0) {
    detail::launch_attention_combine(step, p, workspace, o, stream);
    DSI_CUDA_LAUNCHED("attention_combine_kernel");
  }
  return Status::ok();
}

Status ring_write(const StepDevice& step, const LayerStateView& view, const float* kv_new, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(step, "ring_write"));
  if (view.ring_rows <= 0 || view.head_dim <= 0) return Status::error("ring_write: the layer has no ring");
  if (step.T == 0) return Status::ok();
  if (!kv_new) return Status::error("ring_write: null kv_new");
  detail::launch_ring_write(step, view, kv_new, stream);
  DSI_CUDA_LAUNCHED("ring_write_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
