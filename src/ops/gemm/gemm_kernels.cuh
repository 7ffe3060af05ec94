// Internal (CUDA-only) interface between the GEMM entry points (gemm.cu), the MoE (ops/moe/moe.cu) and the two
// kernel families (gemm_skinny.cu, gemm_tiled.cu). One launch covers `groups` independent problems:
//   rows of group g: [row_off[g], row_off[g+1]) when row_off != nullptr (MoE: tokens grouped by expert),
//                    else [0, M);
//   x row of launch row p: x + g*x_gstride + (x_rows ? x_rows[p] : p) * ldx   (x_rows gathers tokens for the MoE);
//   y row of launch row p: y + g*y_gstride + p * ldy;
//   weight of group g: wdata_arr[g] / wscale_arr[g] (rows [0, N)) when wdata_arr != nullptr (per-expert tensors),
//                      else rows [g*N, (g+1)*N) of wdata / wscale (grouped projection).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_cuda.h"

namespace dsinfer::ops::cuda::detail {

struct GemmArgs {
  const float* x = nullptr;
  int64_t ldx = 0, x_gstride = 0;
  const int32_t* x_rows = nullptr;
  float* y = nullptr;
  int64_t ldy = 0, y_gstride = 0;
  int64_t M = 0;
  const int32_t* row_off = nullptr;
  int64_t groups = 1, N = 0, K = 0;
  const uint8_t* wdata = nullptr;
  const uint8_t* wscale = nullptr;
  const void* const* wdata_arr = nullptr;
  const void* const* wscale_arr = nullptr;
  int64_t scale_cols = 0;  // FP8: ceil(K / block_k); FP4: K / 32
  int64_t block_n = 128, block_k = 128;
  bool scale_e8m0 = true;
  bool accumulate = false;
  bool w_vec = false;  // 16-byte weight vectors are legal (K and alignment allow; FP8 block_k % 16 == 0)
  bool x_vec = false;  // 16-byte x loads are legal (x, ldx, x_gstride 16-byte multiples)
  int m_tiles_z = 1;   // tiled kernel: grid z (m-tiles walked by each block with stride gridDim.z)
};

// Elements per 16-byte weight vector.
inline constexpr int64_t vec_elems(WeightFormat f) {
  return f == WeightFormat::F32 ? 4 : f == WeightFormat::BF16 ? 8 : f == WeightFormat::FP8_BLOCK ? 16 : 32;
}

// Launchers; arguments are validated by the callers.
Status launch_gemm_skinny(WeightFormat f, const GemmArgs& a, cudaStream_t s);
Status launch_gemm_tiled(WeightFormat f, const GemmArgs& a, cudaStream_t s);

// Fills the weight fields of `a` from `w` (single weight, grouped by rows) and decides w_vec / x_vec.
void set_weight_args(GemmArgs& a, const DeviceWeight& w);
void set_x_vec(GemmArgs& a);

}  // namespace dsinfer::ops::cuda::detail
