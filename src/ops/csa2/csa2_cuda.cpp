// Argument checks and launches of the CUDA CSA2 kernels (see csa2_cuda.h).
#include "ops/csa2/csa2_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
Status check_step(const StepDevice& st, const char* op) {
  if (st.T < 0 || st.T > 0x7fffffff) return Status::errorf("{}: bad token count {}", op, st.T);
  if (st.T > 0 && (!st.pos || !st.seq_of_token || !st.cu_seqlens || !st.start_pos || !st.slot || !st.block_tables))
    return Status::errorf("{}: step arrays missing", op);
  return Status::ok();
}
}  // namespace

Status csa2_qat(float* x, int64_t rows, int64_t dim, int64_t block, QatKind kind, void* stream) {
  if (rows < 0 || rows > 0x7fffffff || dim <= 0 || dim > 8192 || block <= 0)
    return Status::errorf("csa2_qat: bad shape rows={} dim={} block={} (dim <= 8192)", rows, dim, block);
  if (rows == 0 || dim % block != 0) return Status::ok();  // the reference leaves such vectors unchanged
  if (!x) return Status::error("csa2_qat: null input");
  detail::launch_csa2_qat(x, rows, dim, block, kind, stream);
  DSI_CUDA_LAUNCHED("csa2 qat_kernel");
  return Status::ok();
}

Status csa2_pool(const StepDevice& st, const LayerStateView& view, int64_t ratio, int64_t d, const float* kv,
                 const float* gate, float* latent, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(st, "csa2_pool"));
  if (ratio < 2 || d <= 0) return Status::errorf("csa2_pool: ratio {} must be >= 2 and d {} > 0", ratio, d);
  if (view.frontier_offset < 0 || view.frontier_rows < ratio || view.frontier_width < 2 * d)
    return Status::errorf("csa2_pool: the layer's frontier ({} rows of {} floats) cannot hold a ratio-{} group of width {}",
                          view.frontier_rows, view.frontier_width, ratio, d);
  if (st.T == 0) return Status::ok();
  if (!kv || !gate || !latent) return Status::error("csa2_pool: null input or output");
  detail::launch_csa2_pool(st, view, ratio, d, kv, gate, latent, stream);
  DSI_CUDA_LAUNCHED("csa2 pool_kernel");
  return Status::ok();
}

Status csa2_frontier_write(const StepDevice& st, const LayerStateView& view, int64_t d, const float* kv,
                           const float* gate, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(st, "csa2_frontier_write"));
  if (view.frontier_offset < 0 || view.frontier_rows < 1 || view.frontier_width < 2 * d || d <= 0)
    return Status::errorf("csa2_frontier_write: no frontier of width {} for d {}", view.frontier_width, d);
  if (st.T == 0) return Status::ok();
  if (!kv || !gate) return Status::error("csa2_frontier_write: null input");
  detail::launch_csa2_frontier_write(st, view, d, kv, gate, stream);
  DSI_CUDA_LAUNCHED("csa2 frontier_write_kernel");
  return Status::ok();
}

Status csa2_emit(const StepDevice& st, const LayerStateView& view, const Csa2EmitCudaParams& p, const float* latent,
                 const float* key, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(st, "csa2_emit"));
  if (p.ratio < 1 || p.d <= 0 || p.di <= 0 || p.d + p.di > 12288)
    return Status::errorf("csa2_emit: bad ratio {} / widths d={} di={}", p.ratio, p.d, p.di);
  if (p.rope_dim < 0 || p.rope_dim % 2 || p.rope_dim > p.d || p.rope_dim > p.di || (p.rope_dim > 0 && !p.inv_freq))
    return Status::errorf("csa2_emit: bad rope_dim {} (even, <= d and di, with frequencies)", p.rope_dim);
  if (view.entries_offset < 0 || view.index_keys_offset < 0 || view.head_dim != p.d || view.index_head_dim != p.di)
    return Status::error("csa2_emit: the layer has no compressed entries / indexer keys of these widths");
  if (!p.key_norm_w) return Status::error("csa2_emit: null key norm weight");
  if (st.T == 0) return Status::ok();
  if (!latent || !key) return Status::error("csa2_emit: null input");
  detail::launch_csa2_emit(st, view, p, latent, key, stream);
  DSI_CUDA_LAUNCHED("csa2 emit_kernel");
  return Status::ok();
}

Status csa2_index_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p, const float* q,
                         const float* w, float* scores, void* stream) {
  DSI_RETURN_IF_ERROR(check_step(st, "csa2_index_scores"));
  if (p.heads <= 0 || p.dim <= 0 || p.ratio < 1 || p.stride <= 0)
    return Status::errorf("csa2_index_scores: bad heads {} dim {} ratio {} stride {}", p.heads, p.dim, p.ratio, p.stride);
  if (src.index_keys_offset < 0 || src.index_head_dim != p.dim)
    return Status::error("csa2_index_scores: the KV source has no indexer keys of this width");
  if (p.fast && p.official) return Status::error("csa2_index_scores: the fast scores are not the official numerics");
  if (detail::csa2_index_scores_smem(p.heads, p.dim, p.fast) > kCsa2MaxScoreSmem)
    return Status::errorf("csa2_index_scores: {} heads x {} dims do not fit the kernel's shared memory", p.heads, p.dim);
  if (st.T == 0) return Status::ok();
  if (!q || !w || !scores) return Status::error("csa2_index_scores: null input or output");
  detail::launch_csa2_index_scores(st, src, p, q, w, scores, stream);
  DSI_CUDA_LAUNCHED("csa2 index_scores_kernel");
  return Status::ok();
}

Status csa2_index_select(const StepDevice& st, const Csa2IndexCudaParams& p, float* scores, uint8_t* mask,
                         int32_t* mask_n, float* block_scratch, int32_t* sel, void* stream, void* pair_scratch) {
  DSI_RETURN_IF_ERROR(check_step(st, "csa2_index_select"));
  if (p.topk < 1 || p.topk > kCsa2MaxTopk || p.ratio < 1 || p.stride <= 0)
    return Status::errorf("csa2_index_select: topk {} outside [1, {}] or bad ratio {} / stride {}", p.topk, kCsa2MaxTopk,
                          p.ratio, p.stride);
  if (p.mode == Csa2SelectMode::Candidate && (p.cand_block_size < 1 || p.cand_topk_blocks < 0))
    return Status::errorf("csa2_index_select: bad candidate blocks (size {}, top {})", p.cand_block_size, p.cand_topk_blocks);
  if (st.T == 0) return Status::ok();
  if (!scores || !sel || (p.mode != Csa2SelectMode::Plain && (!mask || !mask_n)) ||
      (p.mode == Csa2SelectMode::Candidate && !block_scratch))
    return Status::error("csa2_index_select: null input or output");
  if (p.official && !pair_scratch) return Status::error("csa2_index_select: official numerics need the pair scratch");
  detail::launch_csa2_index_select(st, p, scores, mask, mask_n, block_scratch, pair_scratch, sel, stream);
  DSI_CUDA_LAUNCHED("csa2 index_select_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
