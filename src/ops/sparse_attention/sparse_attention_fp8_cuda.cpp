// Argument checks and launches of the FP8-state sparse attention decode (see sparse_attention_fp8_cuda.h).
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/sparse_attention/sparse_attention_plan.h"  // plan_sparse_attention_fp8_kernel

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
  if (s.pages.page_rows <= 0 || s.pages.page_stride % 16 != 0 || s.pages.offset < 0 || s.pages.offset % 16 != 0)
    return Status::errorf("sparse_attention_fp8: key list {} has bad pages ({} rows, stride {}, offset {})", i,
                          s.pages.page_rows, s.pages.page_stride, s.pages.offset);
  return Status::ok();
}
}  // namespace

Status sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                            void* stream) {
  if (p.T < 0 || p.T > 0x7fffffff) return Status::errorf("sparse_attention_fp8: bad token count {}", p.T);
  if (p.heads <= 0 || p.heads > 65535 * detail::kFp8Heads)
    return Status::errorf("sparse_attention_fp8: bad head count {}", p.heads);
  if (!p.sinks) return Status::error("sparse_attention_fp8: null sinks");
  if (p.q_norm) return Status::error("sparse_attention_fp8: a raw query (q_norm) is the split prefill op's alone");
  for (int i = 1; i < SparseAttentionFp8Params::kLists; ++i)
    if (!p.keys[i - 1].idx && p.keys[i].idx)
      return Status::errorf("sparse_attention_fp8: key list {} after an empty list {}", i, i - 1);
  for (int i = 0; i < SparseAttentionFp8Params::kLists; ++i) DSI_RETURN_IF_ERROR(check_source(p.keys[i], i));
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > 512 || (p.rope_dim > 0 && (!p.inv_freq || !p.pos)))
    return Status::errorf("sparse_attention_fp8: bad rope_dim {} (even, <= 512, with inv_freq and pos)", p.rope_dim);
  if (p.num_splits < 1 || p.num_splits > 65535)
    return Status::errorf("sparse_attention_fp8: num_splits {}", p.num_splits);
  if (p.num_splits > 1 && !workspace) return Status::error("sparse_attention_fp8: num_splits > 1 needs a workspace");
  if (int(p.kernel) < 0 || int(p.kernel) > int(Fp8AttentionKernel::kRoles64))
    return Status::errorf("sparse_attention_fp8: unknown kernel {}", int(p.kernel));
  if (p.kernel == Fp8AttentionKernel::kRoles64) {  // RoPE dims in one warpgroup's, 30-bit rows, max before scale
    if (p.rope_dim > 256) return Status::errorf("sparse_attention_fp8: kRoles64 needs rope_dim <= 256, {}", p.rope_dim);
    if (!(p.scale > 0.0f)) return Status::errorf("sparse_attention_fp8: kRoles64 needs scale > 0, {}", p.scale);
    for (const Fp8KeySource& s : p.keys)
      if (s.idx && (s.rows > (int64_t(1) << 30) || s.pages.page_rows >= (int64_t(1) << 30)))
        return Status::errorf("sparse_attention_fp8: kRoles64 needs caches under 2^30 rows ({}, pages of {})", s.rows,
                              s.pages.page_rows);
    int64_t keys = 0;  // its splits and items in 32-bit arithmetic
    for (const Fp8KeySource& s : p.keys) keys += s.idx ? s.stride : 0;
    const int64_t items = p.T * ((p.heads + detail::kFp8Heads - 1) / detail::kFp8Heads) * p.num_splits;
    if (keys + p.num_splits >= (int64_t(1) << 31) || items >= (int64_t(1) << 31))
      return Status::errorf("sparse_attention_fp8: kRoles64 needs keys and items under 2^31 ({}, {})", keys, items);
  }
  if (p.T == 0) return Status::ok();
  if (!q || !o) return Status::error("sparse_attention_fp8: null q or output");
  int64_t max_keys = 0;
  for (const Fp8KeySource& s : p.keys) max_keys += s.idx ? s.stride : 0;
  int dev = 0, sms = 0;
  DSI_CUDA_TRY(cudaGetDevice(&dev));
  DSI_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const Fp8AttentionKernel kernel =
      plan_sparse_attention_fp8_kernel(p.kernel, p.T, p.heads, max_keys, p.num_splits, sms);
  if (kernel == Fp8AttentionKernel::kRoles64) {
    detail::launch_sparse_attention_fp8_r64(p, q, o, workspace, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_r64_kernel");
  } else if (kernel != Fp8AttentionKernel::kLockstep) {
    detail::launch_sparse_attention_fp8_ws(p, q, o, workspace, kernel == Fp8AttentionKernel::kWarpSpecialisedPair,
                                           stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_ws_kernel");
  } else {
    detail::launch_sparse_attention_fp8(p, q, o, workspace, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_kernel");
  }
  if (p.num_splits > 1) {
    detail::launch_sparse_attention_fp8_combine(p, workspace, o, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_combine_kernel");
  }
  return Status::ok();
}

Status fp8_state_keys(const StepDevice& st, const LayerStateView& v, const Fp8StateKeys& k, void* stream) {
  if (!v.fp8) return Status::error("fp8_state_keys: the layer's state is not in the FP8 format");
  if (k.window <= 0 || v.ring_rows < k.window)
    return Status::errorf("fp8_state_keys: window {} needs ring_rows >= window (have {})", k.window, v.ring_rows);
  if (k.m < 0 || k.comp_stride < 0 || (k.m > 0 && (k.comp_stride == 0 || v.entries_per_block <= 0)) ||
      (k.topk_idx && (k.topk <= 0 || k.topk > k.comp_stride)))
    return Status::errorf("fp8_state_keys: bad compressed list (m {}, stride {}, topk {})", k.m, k.comp_stride, k.topk);
  if (st.T < 0 || st.T > 0x7fffffff) return Status::errorf("fp8_state_keys: bad token count {}", st.T);
  if (st.T == 0) return Status::ok();
  if (!k.ring || !k.ring_len || !k.step || !k.step_len || !k.pos32 || (k.comp_stride > 0 && (!k.comp || !k.comp_len)))
    return Status::error("fp8_state_keys: null list");
  detail::launch_fp8_state_keys(st, v, k, stream);
  DSI_CUDA_LAUNCHED("fp8_state_keys_kernel");
  return Status::ok();
}

Status fp8_ring_rows(const StepDevice& st, const LayerStateView& v, int32_t* rows, void* stream) {
  if (!v.fp8 || v.ring_rows <= 0) return Status::error("fp8_ring_rows: the layer has no FP8 ring");
  if (st.T < 0 || st.T > 0x7fffffff) return Status::errorf("fp8_ring_rows: bad token count {}", st.T);
  if (st.T == 0) return Status::ok();
  if (!rows) return Status::error("fp8_ring_rows: null rows");
  detail::launch_fp8_ring_rows(st, v, rows, stream);
  DSI_CUDA_LAUNCHED("fp8_ring_rows_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
