// Launcher of the expert-parallel index remap kernel (expert_remap.cu); arguments checked by expert_remap_cuda.cpp.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {

void launch_remap_experts(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream);
void launch_remap_experts_eplb(int32_t* idx, int64_t n, int32_t topk, const int32_t* table, int32_t experts,
                               int32_t rank, int32_t slots_per_rank, uint32_t* counts, void* stream);

}  // namespace dsinfer::ops::cuda::detail
