// Launchers of moe_exchange.cu (checked by moe_exchange_cuda.cpp). Plain C++17.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda::detail {

void launch_pack_rows(const float* x, int64_t dim, const int32_t* rows, int64_t n, bool bf16, void* out, void* stream);
void launch_widen_rows(const void* in, int64_t count, bool bf16, float* out, void* stream);
void launch_fill(float* out, int64_t n, float value, void* stream);

}  // namespace dsinfer::ops::cuda::detail
