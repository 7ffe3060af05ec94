// The widening choice (see gemm_widen_plan.h).
#include "ops/gemm/gemm_widen_plan.h"

#include <cstdint>

namespace dsinfer::ops::cuda {

bool gemm_widen_supports(const DeviceWeight& w) {
  if (w.fmt != WeightFormat::FP8_BLOCK || !w.data || !w.scale || !w.scale_e8m0 || gemm_lt_supports(w)) return false;
  return w.rows > 0 && w.cols > 0 && w.rows % 4 == 0 && w.cols % 8 == 0 && w.block_n > 0 && w.block_k > 0;
}

bool gemm_widen_wants(const DeviceWeight& w, int64_t M, KernelMode mode, const GemmSettings& s) {
  return mode == KernelMode::kFast && s.cublaslt && M >= s.lt_min_m && gemm_widen_supports(w);
}

bool gemm_grouped_bf16_lt_wants(const DeviceWeight& w, int64_t groups, int64_t M, KernelMode mode, const GemmSettings& s) {
  if (mode != KernelMode::kFast || !s.cublaslt || M < kGemmGroupedLtMinM || w.fmt != WeightFormat::BF16 || !w.data)
    return false;
  if (groups < 2 || w.rows % groups != 0) return false;
  return gemm_lt_supports(gemm_group_view_bf16(w, groups, 0));
}

DeviceWeight gemm_group_view_bf16(const DeviceWeight& w, int64_t groups, int64_t g) {
  DeviceWeight v = w;
  v.rows = w.rows / groups;
  v.data = static_cast<const uint8_t*>(w.data) + g * v.rows * w.cols * 2;
  return v;
}

}  // namespace dsinfer::ops::cuda
