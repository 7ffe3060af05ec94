// Launcher of the expert-parallel index remap kernel (expert_remap.cu); arguments checked by expert_remap_cuda.cpp.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {

void launch_remap_experts(int32_t* idx, int64_t n, int32_t lo, int32_t hi, void* stream);

}  // namespace dsinfer::ops::cuda::detail
