// Argument checks and launches of the CUDA Lightning Indexer (see indexer_cuda.h).
#include "ops/indexer/indexer_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Status indexer_topk(const StepDevice& step, const LayerStateView& view, const IndexerCudaParams& p, const float* q,
                    const float* weights, int64_t max_visible, float* scores, int32_t* out, void* stream) {
  if (p.heads <= 0 || p.heads > detail::kIdxMaxHeads)
    return Status::errorf("indexer: {} heads outside [1, {}]", p.heads, detail::kIdxMaxHeads);
  if (p.dim <= 0 || p.dim % 4 != 0 || p.dim > 256)
    return Status::errorf("indexer: index_head_dim {} must be a multiple of 4 <= 256", p.dim);
  if (p.dim != view.index_head_dim || view.index_keys_offset < 0)
    return Status::errorf("indexer: index_head_dim {} but the layer's state has {} (keys offset {})", p.dim,
                          view.index_head_dim, view.index_keys_offset);
  if (p.m <= 0 || p.topk <= 0) return Status::errorf("indexer: bad ratio {} or topk {}", p.m, p.topk);
  if (max_visible < 0 || (max_visible + detail::kIdxKeysPerBlock - 1) / detail::kIdxKeysPerBlock > 65535)
    return Status::errorf("indexer: max_visible {} out of range", max_visible);
  if (step.T < 0 || step.T > 0x7fffffff) return Status::errorf("indexer: bad token count {}", step.T);
  if (step.T == 0) return Status::ok();
  if (!q || !weights || !out || (max_visible > 0 && !scores) || !step.pos || !step.seq_of_token || !step.block_tables)
    return Status::error("indexer: null input, output or step array");
  if (view.fp8 && p.dim != detail::kIdxTcDim)
    return Status::errorf("indexer: FP8 keys have {} channels, not index_head_dim {}", detail::kIdxTcDim, p.dim);
  if (max_visible > 0 && view.fp8) {
    detail::launch_indexer_scores_tc(step, view, p, q, weights, max_visible, scores, stream);
    DSI_CUDA_LAUNCHED("indexer_scores_tc_kernel");
  } else if (max_visible > 0) {
    detail::launch_indexer_scores(step, view, p, q, weights, max_visible, scores, stream);
    DSI_CUDA_LAUNCHED("indexer_scores_kernel");
  }
  detail::launch_indexer_select(step, p, scores, max_visible, out, stream);
  DSI_CUDA_LAUNCHED("indexer_select_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
