// The expert-parallel index remap kernel (see expert_remap_cuda.h): one thread per top-k entry, the same
// remap_expert as the CPU reference (ops/moe/expert_remap.h).
#include <cuda_runtime.h>

#include "ops/moe/expert_remap.h"
#include "ops/moe/expert_remap_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

__global__ void remap_experts_kernel(int32_t* idx, int64_t n, int32_t lo, int32_t hi) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) idx[i] = ops::remap_expert(idx[i], lo, hi);
}

// EPLB: the placement table's remap (ops/moe/expert_remap.h remap_expert_eplb), plus the load statistics: one
// atomic increment of counts[e] per valid global id (counts null on ranks that do not count).
__global__ void remap_experts_eplb_kernel(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                                          int32_t rank, int32_t slots_per_rank, unsigned int* counts) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t e = idx[i];
  if (counts && e >= 0 && e < experts) atomicAdd(counts + e, 1u);
  idx[i] = ops::remap_expert_eplb(e, i / topk, table, experts, rank, slots_per_rank);
}

}  // namespace

void launch_remap_experts_eplb(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                               int32_t rank, int32_t slots_per_rank, uint32_t* counts, void* stream) {
  remap_experts_eplb_kernel<<<unsigned((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      idx, n, topk, table, experts, rank, slots_per_rank, reinterpret_cast<unsigned int*>(counts));
}

void launch_remap_experts(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream) {
  remap_experts_kernel<<<unsigned((n + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(idx, n, lo, hi);
}

}  // namespace dsinfer::ops::cuda::detail
