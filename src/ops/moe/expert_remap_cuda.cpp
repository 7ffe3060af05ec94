// Expert-parallel index remap (see expert_remap_cuda.h): argument checks and the launch.
#include "ops/moe/expert_remap_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/moe/expert_remap_launch.h"

namespace dsinfer::ops::cuda {

Status remap_experts_cuda(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream) {
  if (n < 0 || lo < 0 || hi < lo) return Status::errorf("remap_experts_cuda: bad n={} or range [{}, {})", n, lo, hi);
  if (n == 0) return Status::ok();
  if (!idx) return Status::error("remap_experts_cuda: null index array");
  if ((n + 255) / 256 > 0x7fffffff) return Status::error("remap_experts_cuda: too many entries");
  detail::launch_remap_experts(idx, n, lo, hi, stream);
  DSI_CUDA_LAUNCHED("remap_experts_kernel");
  return Status::ok();
}

Status remap_experts_eplb_cuda(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                               int32_t rank, int32_t slots_per_rank, uint32_t* counts, void* stream) {
  if (n < 0 || topk < 1 || experts < 1 || rank < 0 || slots_per_rank < 1 || n % topk != 0)
    return Status::errorf("remap_experts_eplb_cuda: bad n={} topk={} experts={} rank={} slots={}", n, topk, experts,
                          rank, slots_per_rank);
  if (n == 0) return Status::ok();
  if (!idx || !table) return Status::error("remap_experts_eplb_cuda: null index array or table");
  if ((n + 255) / 256 > 0x7fffffff) return Status::error("remap_experts_eplb_cuda: too many entries");
  detail::launch_remap_experts_eplb(idx, n, topk, table, experts, rank, slots_per_rank, counts, stream);
  DSI_CUDA_LAUNCHED("remap_experts_eplb_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
