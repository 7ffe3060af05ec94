// TP attention + EP on a CUDA shard (cuda_forward.h CudaForward::head_groups; docs/multi_gpu.md "TP attention on the
// CUDA runner"). The state, the shared K=V latent, the compressors and the indexer are replicated, as in EP; a shard
// runs the query heads of its wo_a output groups: their rows of wq_b, their sinks and sparse attention, and wo_a for
// its groups (attention_v4_cuda.cpp). The groups' outputs are then gathered exactly: each shard writes its columns
// into a buffer zero elsewhere and the all-reduce sums it (x + 0 = x, on NCCL as on the in-process group), so every
// shard holds the one-rank wo_a output and runs wo_b whole. Bit-identical to one rank because the kernels' bits of a
// head or a group do not depend on how many others the call holds (per element of each GEMM, per head of the
// attention kernels) once every part runs the whole weight's GEMM kernel: tp::rows_part / tp::groups_part
// (tensor_parallel_parts.h) decide how a rank calls its rows of wq_b and its groups of wo_a so that it does.
#include <cuda_runtime.h>

#include "backends/cuda/runner/cuda_forward.h"
#include "backends/cuda/runner/tensor_parallel_parts.h"
#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_plan.h"
#include "parallel/parallel_plan.h"

namespace dsinfer::backends {

using ops::cuda::DeviceWeight;
using ops::cuda::WeightFormat;

CudaForward::HeadGroups CudaForward::head_groups() const {
  const int64_t H = cfg_.num_attention_heads, G = cfg_.o_groups;
  if (!core_.tp_ || ep_size_ <= 1 || G < 1) return {0, G, 0, H};
  // The one place ranges are split (parallel::head_range), over the output groups: a rank holds whole groups, so
  // its wo_a outputs are complete (a group split between ranks would leave partial sums to add).
  auto r = parallel::head_range(G, ep_rank_, ep_size_);
  if (!r.is_ok()) return {0, 0, 0, 0};
  return {r->lo, r->hi, r->lo * H / G, r->hi * H / G};
}

Status CudaForward::clear_head_groups(float* mid, int64_t T, int64_t width) {
  if (T <= 0) return Status::ok();
  DSI_CUDA_TRY(cudaMemsetAsync(mid, 0, size_t(T * width) * sizeof(float), static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaForward::gather_head_groups(float* mid, int64_t T, int64_t width, int64_t layer) {
  if (!comm_) return Status::error("cuda runner: TP attention without a communicator");
  DSI_RETURN_IF_ERROR(mark("attn_allreduce", layer, true));
  DSI_RETURN_IF_ERROR(comm_->all_reduce_sum(mid, size_t(T * width), stream_));
  DSI_RETURN_IF_ERROR(mark("attn_allreduce", layer, false));
  core_.traffic_.bytes += T * width * int64_t(sizeof(float));
  ++core_.traffic_.calls;
  return Status::ok();
}

namespace tp {

Result<DeviceWeight> weight_rows(const DeviceWeight& w, int64_t r0, int64_t r1) {
  if (r0 < 0 || r1 < r0 || r1 > w.rows)
    return Status::errorf("weight rows [{}, {}) of a {}-row weight", r0, r1, w.rows);
  DeviceWeight v = w;
  v.rows = r1 - r0;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto* scale = static_cast<const uint8_t*>(w.scale);
  const int64_t scale_bytes = w.scale_e8m0 ? 1 : 4;
  switch (w.fmt) {
    case WeightFormat::F32: v.data = data + r0 * w.cols * 4; break;
    case WeightFormat::BF16: v.data = data + r0 * w.cols * 2; break;
    case WeightFormat::FP8_BLOCK: {
      // View row i reads scale row (r0 / block_n) + i / block_n: right when r0 starts a block, or when the rows
      // lie inside one block (the small test models' groups).
      if (w.block_n <= 0 || (r0 % w.block_n != 0 && r0 % w.block_n + (r1 - r0) > w.block_n))
        return Status::errorf("weight rows [{}, {}) cut the FP8 scale blocks of {} rows", r0, r1, w.block_n);
      const int64_t kb = (w.cols + w.block_k - 1) / w.block_k;
      v.data = data + r0 * w.cols;
      v.scale = scale + (r0 / w.block_n) * kb * scale_bytes;
      break;
    }
    case WeightFormat::FP4_G32:
      v.data = data + r0 * (w.cols / 2);
      v.scale = scale + r0 * (w.cols / 32) * scale_bytes;
      break;
  }
  return v;
}

namespace {

// The batch-invariant plan of a single weight's call (what gemm_cuda would launch for it under kBatchInvariant).
ops::cuda::GemmInvariantPlan invariant_plan(const DeviceWeight& w, int sm_count) {
  ops::cuda::detail::GemmArgs a;
  a.M = 1;
  a.N = w.rows;
  a.K = w.cols;
  ops::cuda::detail::set_weight_args(a, w);
  return ops::cuda::gemm_invariant_plan(ops::cuda::gemm_weight_shape(a, w.fmt), sm_count);
}

bool same_plan(const ops::cuda::GemmInvariantPlan& a, const ops::cuda::GemmInvariantPlan& b) {
  return a.kernel == b.kernel && a.splits == b.splits && a.kb_per_split == b.kb_per_split;
}

}  // namespace

Result<PartGemm> rows_part(const DeviceWeight& w, int64_t r0, int64_t r1, bool invariant, int sm_count) {
  DSI_ASSIGN_OR_RETURN(const DeviceWeight v, weight_rows(w, r0, r1));
  PartGemm p{v, 1, 0, 0};
  if (!invariant || (r0 == 0 && r1 == w.rows)) return p;
  const ops::cuda::GemmInvariantPlan whole = invariant_plan(w, sm_count);
  if (same_plan(whole, invariant_plan(v, sm_count))) return p;
  const int64_t n = r1 - r0;
  if (whole.kernel == ops::cuda::GemmKernel::kTiled && n % 2 == 0) {
    p.groups = 2;
    p.y_stride = n / 2;
    return p;
  }
  return Status::errorf("TP under --batch-invariant: rows [{}, {}) of a {} x {} weight would run another GEMM kernel "
                        "than the whole weight (gemm_invariant_plan), so a rank could not keep the one-rank bits",
                        r0, r1, w.rows, w.cols);
}

Result<PartGemm> groups_part(const DeviceWeight& w, int64_t groups, int64_t g0, int64_t g1, int64_t x_stride) {
  if (groups < 1 || w.rows % groups != 0 || g0 < 0 || g1 <= g0 || g1 > groups)
    return Status::errorf("groups [{}, {}) of a weight of {} rows in {} groups", g0, g1, w.rows, groups);
  const int64_t r = w.rows / groups, ng = g1 - g0;
  DSI_ASSIGN_OR_RETURN(const DeviceWeight v, weight_rows(w, g0 * r, g1 * r));
  if (ng == 1 && groups > 1 && r % 2 == 0) return PartGemm{v, 2, 0, r / 2};
  return PartGemm{v, ng, x_stride, r};
}

}  // namespace tp

}  // namespace dsinfer::backends
