// The official-numerics GEMM kernel (see gemm_official_cuda.h): one warp per output element, lane = position in a
// 32-wide K block; each block of 8 warps takes 8 output columns of one group and walks the group's rows.
#include "cuda/ops_device.cuh"
#include "ops/gemm/gemm_dequant.cuh"
#include "ops/gemm/gemm_official_cuda.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kWarps = 8;

template <WeightFormat F>
__global__ void __launch_bounds__(kWarps * 32) gemm_official_kernel(GemmArgs a, OfficialGemm mode) {
  const int lane = threadIdx.x & 31;
  const int64_t g = blockIdx.y, n = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= a.N) return;  // warp-uniform
  int64_t begin, count;
  group_rows(a, g, begin, count);
  const WPtr w = group_weight(a, g);
  for (int64_t p = begin; p < begin + count; ++p) {
    const float* xr = x_row(a, g, p);
    float acc = 0.0f;
    double dacc = 0.0;
    for (int64_t k0 = 0; k0 < a.K; k0 += 32) {
      const int64_t k = k0 + lane;
      const float xv = k < a.K ? xr[k] : 0.0f;
      const double wv = k < a.K ? double(load_w_scalar<F>(a, w, w.row0 + n, k)) : 0.0;
      if (mode == OfficialGemm::kQuantized) {
        const float s = dev::fp8_act_scale(dev::warp_max(fabsf(xv)));
        const float q = dev::round_e4m3(fminf(fmaxf(__fdiv_rn(xv, s), -448.0f), 448.0f));
        const double part = dev::warp_sum(double(q) * wv);
        acc = __fadd_rn(acc, __fmul_rn(float(part), s));
      } else {
        dacc += dev::warp_sum(double(xv) * wv);
      }
    }
    float out = mode == OfficialGemm::kQuantized ? acc : float(dacc);
    if (mode != OfficialGemm::kF32) out = dev::round_bf16(out);
    if (lane == 0) y_row(a, g, p)[n] = out;
  }
}
}  // namespace

void launch_gemm_official(WeightFormat f, const GemmArgs& a, OfficialGemm mode, void* stream) {
  const dim3 grid(unsigned((a.N + kWarps - 1) / kWarps), unsigned(a.groups));
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (f) {
    case WeightFormat::F32: gemm_official_kernel<WeightFormat::F32><<<grid, kWarps * 32, 0, st>>>(a, mode); break;
    case WeightFormat::BF16: gemm_official_kernel<WeightFormat::BF16><<<grid, kWarps * 32, 0, st>>>(a, mode); break;
    case WeightFormat::FP8_BLOCK:
      gemm_official_kernel<WeightFormat::FP8_BLOCK><<<grid, kWarps * 32, 0, st>>>(a, mode);
      break;
    case WeightFormat::FP4_G32: gemm_official_kernel<WeightFormat::FP4_G32><<<grid, kWarps * 32, 0, st>>>(a, mode); break;
  }
}

}  // namespace dsinfer::ops::cuda::detail
