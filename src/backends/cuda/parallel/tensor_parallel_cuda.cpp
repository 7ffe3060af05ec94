// TP attention + EP on a CUDA shard (cuda_forward.h CudaForward::head_groups; docs/multi_gpu.md "TP attention on the
// CUDA runner"). The state, the shared K=V latent, the compressors and the indexer are replicated, as in EP; a shard
// runs the query heads of its wo_a output groups: their rows of wq_b, their sinks and sparse attention, and wo_a for
// its groups (attention_v4_cuda.cpp). The groups' outputs are then gathered exactly: each shard writes its columns
// into a buffer zero elsewhere and the all-reduce sums it (x + 0 = x, on NCCL as on the in-process group), so every
// shard holds the one-rank wo_a output and runs wo_b whole: bit-identical to one rank wherever the kernels' bits of a
// head or a group do not depend on how many others the call holds (per element of each GEMM, per head of the
// attention kernels).
#include <cuda_runtime.h>

#include "backends/cuda/runner/cuda_forward.h"
#include "cuda/cuda_common.h"
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

Result<DeviceWeight> CudaForward::weight_rows(const DeviceWeight& w, int64_t r0, int64_t r1) {
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

}  // namespace dsinfer::backends
