// Parameters and kernel launcher behind rope_cuda.h. No CUDA types and no Status here: the .cu side must stay
// free of fmt (nvcc compiles it very slowly); rope_cuda.cpp validates and checks the launch.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

enum class HeadNorm { None, Unweighted, Weighted };

struct HeadNormRopeParams {
  int64_t rows = 0;                 // tokens
  int64_t heads = 1;                // vectors per row
  int64_t dim = 0;                  // vector length (multiple of 4)
  HeadNorm norm = HeadNorm::None;
  const float* norm_w = nullptr;    // [dim] for HeadNorm::Weighted
  float eps = 1e-6f;
  int64_t rope_dim = 0;             // trailing channels rotated (even, <= dim); 0 = no RoPE
  const float* inv_freq = nullptr;  // [rope_dim / 2] fp32 (ops::rope_inv_freq)
  float attention_factor = 1.0f;
  bool inverse = false;             // rotate by -pos (attention output)
};

namespace detail {
void launch_head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
