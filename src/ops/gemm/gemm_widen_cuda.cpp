// Argument checks and the launch of the FP8 -> bf16 widening (see gemm_widen_cuda.h).
#include "ops/gemm/gemm_widen_cuda.h"

#include <cstdint>

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Result<DeviceWeight> widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, int64_t out_elems, void* stream) {
  if (w.fmt != WeightFormat::FP8_BLOCK || !w.scale_e8m0)
    return Status::error("widen_fp8_bf16: needs an FP8_BLOCK weight with E8M0 scales");
  if (w.rows < 1 || w.rows > 0x7fffffff || w.cols < 4 || w.cols % 4 != 0 || w.cols > (int64_t(1) << 30) ||
      w.block_n < 1 || w.block_k < 1)
    return Status::errorf("widen_fp8_bf16: bad shape [{}, {}] with {}x{} blocks (needs K % 4 == 0)", w.rows, w.cols,
                          w.block_n, w.block_k);
  if (!w.data || !w.scale || !out) return Status::error("widen_fp8_bf16: null weight, scales or output");
  if (reinterpret_cast<uintptr_t>(w.data) % 4 != 0 || reinterpret_cast<uintptr_t>(out) % 8 != 0)
    return Status::error("widen_fp8_bf16: weight codes must be 4-byte and the output 8-byte aligned");
  if (out_elems < w.rows * w.cols)
    return Status::errorf("widen_fp8_bf16: output of {} values for a [{}, {}] weight", out_elems, w.rows, w.cols);
  detail::launch_widen_fp8_bf16(w, out, stream);
  DSI_CUDA_LAUNCHED("widen_fp8_bf16_kernel");
  DeviceWeight v;
  v.fmt = WeightFormat::BF16;
  v.rows = w.rows;
  v.cols = w.cols;
  v.data = out;
  return v;
}

}  // namespace dsinfer::ops::cuda
