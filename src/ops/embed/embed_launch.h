// Kernel launcher behind embed_cuda.h (no CUDA types, no Status; validated by embed_cuda.cpp).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

enum class EmbedDType { F32, BF16 };  // BF16: raw bits (uint16)

namespace detail {
void launch_embed(const void* table, EmbedDType dt, int64_t vocab, int64_t dim, const int32_t* tokens, int64_t T,
                  int64_t n, float* X, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
