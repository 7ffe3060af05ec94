// Argument checks, staging layout and launches of the sparse attention prefill (see sparse_attention_prefill_cuda.h).
#include "ops/sparse_attention/sparse_attention_prefill_cuda.h"

#include <algorithm>
#include <cmath>

#include "cuda/cuda_common.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"  // the argument checks and the split workspace
#include "ops/sparse_attention/sparse_attention_plan.h"  // the split kernel's variant
#include "ops/sparse_attention/sparse_attention_prefill_launch.h"

namespace dsinfer::ops::cuda {

namespace {
constexpr int kLists = SparseAttentionFp8Params::kLists;
constexpr int64_t kRowBytes = 512 * 2;
constexpr int64_t align4(int64_t n) { return (n + 3) / 4 * 4; }  // ints, to 16 bytes

// Ints of the count (padded) and the maps: the region zeroed before each call.
int64_t map_ints(const int64_t (&rows)[kLists]) {
  int64_t n = 4;
  for (int64_t r : rows) n += align4(std::max<int64_t>(r, 0));
  return n;
}

void list_shape(const SparseAttentionFp8Params& p, int64_t (&rows)[kLists], int64_t (&strides)[kLists]) {
  for (int i = 0; i < kLists; ++i) {
    rows[i] = p.keys[i].idx ? p.keys[i].rows : 0;
    strides[i] = p.keys[i].idx ? p.keys[i].stride : 0;
  }
}
}  // namespace

int64_t sparse_attention_prefill_capacity(int64_t T, const int64_t (&rows)[kLists], const int64_t (&strides)[kLists]) {
  int64_t named = 0;
  for (int i = 0; i < kLists; ++i)
    named += std::min(std::max<int64_t>(rows[i], 0), T * std::max<int64_t>(strides[i], 0));
  return std::min(named, 2 * T + 16384);
}

int64_t sparse_attention_prefill_staging_bytes(int64_t T, const int64_t (&rows)[kLists],
                                               const int64_t (&strides)[kLists]) {
  const int64_t cap = sparse_attention_prefill_capacity(T, rows, strides);
  return 4 * map_ints(rows) + 4 * align4(2 * cap) + cap * kRowBytes;
}

int64_t sparse_attention_prefill_staging_bytes(const SparseAttentionFp8Params& p) {
  int64_t rows[kLists], strides[kLists];
  list_shape(p, rows, strides);
  return sparse_attention_prefill_staging_bytes(p.T, rows, strides);
}

namespace {
// The staging of a call (checked, carved from `staging` and filled: count and maps zeroed, rows claimed and
// dequantised); p already checked by the caller, T > 0.
Status stage(const SparseAttentionFp8Params& p, void* staging, int64_t staging_bytes, PrefillStaging& s,
             void* stream) {
  const int64_t need = sparse_attention_prefill_staging_bytes(p);
  if (!staging || staging_bytes < need)
    return Status::errorf("sparse_attention_prefill: staging of {} bytes, the call needs {}", staging_bytes, need);
  if (reinterpret_cast<uintptr_t>(staging) % 16 != 0)
    return Status::error("sparse_attention_prefill: the staging is not 16-byte aligned");
  int64_t rows[kLists], strides[kLists];
  list_shape(p, rows, strides);
  int32_t* w = static_cast<int32_t*>(staging);
  s.count = w;
  w += 4;
  for (int i = 0; i < kLists; ++i) {
    s.map[i] = rows[i] > 0 ? w : nullptr;
    w += align4(rows[i]);
  }
  s.cap = sparse_attention_prefill_capacity(p.T, rows, strides);
  s.inv = w;
  w += align4(2 * s.cap);
  s.rows = reinterpret_cast<uint16_t*>(w);
  detail::launch_prefill_stage(p, s, map_ints(rows), stream);
  DSI_CUDA_LAUNCHED("sparse_attention_prefill_stage");
  return Status::ok();
}

// The FP8 op's checks (lists, caches, pages, RoPE, splits) with no launch (T = 0 passes them).
Status check(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, void* stream) {
  SparseAttentionFp8Params none = p;
  none.T = 0;
  none.kernel = Fp8AttentionKernel::kAuto;
  if (p.T < 0 || p.T > 0x7fffffff) return Status::errorf("sparse_attention_prefill: bad token count {}", p.T);
  return sparse_attention_fp8(none, q, o, workspace, stream);
}

// The op (probe 0) or a diagnostic probe of its attention kernel (detail::kPrefillProbe*).
Status run(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace, void* staging,
           int64_t staging_bytes, int probe, void* stream) {
  DSI_RETURN_IF_ERROR(check(p, q, o, workspace, stream));
  if (p.T == 0) return Status::ok();
  if (!q || !o) return Status::error("sparse_attention_prefill: null q or output");
  PrefillStaging s;
  DSI_RETURN_IF_ERROR(stage(p, staging, staging_bytes, s, stream));
  if (probe == 0) {
    detail::launch_sparse_attention_prefill(p, s, q, o, workspace, stream);
  } else if (!detail::launch_sparse_attention_prefill_probe(p, s, q, o, workspace, probe, stream)) {
    return Status::errorf("sparse_attention_prefill: no probe {} (fp32 q only)", probe);
  }
  DSI_CUDA_LAUNCHED("sparse_attention_prefill_kernel");
  if (p.num_splits > 1) {
    detail::launch_sparse_attention_fp8_combine(p, workspace, o, stream);
    DSI_CUDA_LAUNCHED("sparse_attention_fp8_combine_kernel");
  }
  return Status::ok();
}
}  // namespace

Status sparse_attention_prefill(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                void* staging, int64_t staging_bytes, void* stream) {
  return run(p, q, o, workspace, staging, staging_bytes, 0, stream);
}

namespace {
// The split op (flags 0: its planned variant), a variant of its kernel (detail::kSplitVar*) or a diagnostic probe
// (detail::kSplitProbe*).
Status run_split(const SparseAttentionFp8Params& p, const void* q, uint16_t* o, void* staging, int64_t staging_bytes,
                 int flags, void* stream) {
  if (!p.q_bf16) return Status::error("sparse_attention_prefill_split: q must be bf16 (p.q_bf16)");
  if (p.num_splits != 1)
    return Status::errorf("sparse_attention_prefill_split: {} splits, the kernel takes 1", p.num_splits);
  // The FP8 op's checks (less q_norm, this op's alone); the output pointer stands in for its fp32 one (only its
  // presence is checked).
  SparseAttentionFp8Params as_fp8 = p;
  as_fp8.q_norm = false;
  DSI_RETURN_IF_ERROR(check(as_fp8, q, reinterpret_cast<float*>(o), nullptr, stream));
  if (p.q_norm && !(p.q_norm_eps >= 0.0f && std::isfinite(p.q_norm_eps)))
    return Status::errorf("sparse_attention_prefill_split: q_norm_eps {} must be finite and >= 0", p.q_norm_eps);
  if (p.q_norm && (flags & (detail::kSplitVarL2Hints - 1)) != 0)
    return Status::error("sparse_attention_prefill_split: a probe takes a normalised query (q_norm off)");
  if (!p.q_norm && (flags & detail::kSplitQNorm) != 0)
    return Status::error("sparse_attention_prefill_split: kSplitQNorm needs p.q_norm (a raw query and its eps)");
  if (p.split_run < 0 || p.split_run > 1024)
    return Status::errorf("sparse_attention_prefill_split: split_run {} (0 planned, or 1 .. 1,024 tokens)",
                          p.split_run);
  if (p.T == 0) return Status::ok();
  if (!q || !o) return Status::error("sparse_attention_prefill_split: null q or output");
  if (reinterpret_cast<uintptr_t>(q) % 16 != 0 || reinterpret_cast<uintptr_t>(o) % 16 != 0)
    return Status::error("sparse_attention_prefill_split: q or o not 16-byte aligned");
  for (const Fp8KeySource& k : p.keys)  // the kernel's producer indexes the lists in 32-bit arithmetic
    if (k.idx && p.T * k.stride > 0x7fffffff)
      return Status::errorf("sparse_attention_prefill_split: a key list of {} x {} entries", p.T, k.stride);
  if (p.T * ((p.heads + detail::kFp8Heads - 1) / detail::kFp8Heads) > 0x7fffffff || p.T * p.heads > 0x7fffffff)
    return Status::errorf("sparse_attention_prefill_split: {} tokens x {} heads", p.T, p.heads);
  PrefillStaging s;
  DSI_RETURN_IF_ERROR(stage(p, staging, staging_bytes, s, stream));
  const bool probe = (flags & (detail::kSplitVarL2Hints - 1)) != 0;
  const int variant = flags == 0 ? plan_sparse_prefill_split_variant() : flags;
  SparseAttentionFp8Params pr = p;
  if ((variant & detail::kSplitVarReuse) != 0 && pr.split_run == 0)
    pr.split_run = sparse_prefill_split_run(p.T, (p.heads + detail::kFp8Heads - 1) / detail::kFp8Heads,
                                            dsinfer::cuda::current_sm_count());
  const bool launched = probe ? detail::launch_sparse_attention_prefill_split_probe(pr, s, q, o, flags, stream)
                              : detail::launch_sparse_attention_prefill_split(pr, s, q, o, variant, stream);
  if (!launched)
    return Status::errorf("sparse_attention_prefill_split: no TMA tensor map for q, or no probe / variant {}{}",
                          variant, p.q_norm ? " with q_norm (0 or store16 only)" : "");
  DSI_CUDA_LAUNCHED("sparse_attention_prefill_split_kernel");
  return Status::ok();
}
}  // namespace

Status sparse_attention_prefill_split(const SparseAttentionFp8Params& p, const void* q, uint16_t* o, void* staging,
                                      int64_t staging_bytes, void* stream) {
  return run_split(p, q, o, staging, staging_bytes, 0, stream);
}

Status sparse_attention_prefill_split_probe(const SparseAttentionFp8Params& p, const void* q, uint16_t* o,
                                            void* staging, int64_t staging_bytes, int flags, void* stream) {
  if (flags == 0) return Status::error("sparse_attention_prefill_split_probe: 0 is the op");
  return run_split(p, q, o, staging, staging_bytes, flags, stream);
}

Status sparse_attention_prefill_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                      void* staging, int64_t staging_bytes, int probe, void* stream) {
  if (probe == 0) return Status::error("sparse_attention_prefill_probe: probe 0 is the op");
  return run(p, q, o, workspace, staging, staging_bytes, probe, stream);
}

}  // namespace dsinfer::ops::cuda
