// Argument checks and launches of the CUDA numerics simulations (see quant_sim_cuda.h).
#include "ops/quant_sim/quant_sim_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/quant_sim/quant_sim_launch.h"

namespace dsinfer::ops::cuda {

Status fp8_block_sim(float* x, int64_t rows, int64_t row_stride, int64_t n, int64_t block, void* stream) {
  if (rows < 0 || n < 0 || n > row_stride || block <= 0 || n > 8192)
    return Status::errorf("fp8_block_sim: bad shape rows={} n={} row_stride={} block={} (n <= 8192)", rows, n,
                          row_stride, block);
  if (rows == 0 || n == 0) return Status::ok();
  if (!x) return Status::error("fp8_block_sim: null x");
  if (rows > 0x7fffffff) return Status::errorf("fp8_block_sim: {} rows exceed the grid limit", rows);
  detail::launch_fp8_block_sim(x, rows, row_stride, n, block, stream);
  DSI_CUDA_LAUNCHED("fp8_block_sim_kernel");
  return Status::ok();
}

Status hadamard_fp4_sim(float* x, int64_t rows, int64_t dim, int64_t block, void* stream) {
  if (rows < 0 || dim <= 0 || (dim & (dim - 1)) != 0 || dim > 4096 || block <= 0)
    return Status::errorf("hadamard_fp4_sim: dim {} must be a power of two <= 4096 (block {})", dim, block);
  if (rows == 0) return Status::ok();
  if (!x) return Status::error("hadamard_fp4_sim: null x");
  if (rows > 0x7fffffff) return Status::errorf("hadamard_fp4_sim: {} rows exceed the grid limit", rows);
  detail::launch_hadamard_fp4_sim(x, rows, dim, block, stream);
  DSI_CUDA_LAUNCHED("hadamard_fp4_kernel");
  return Status::ok();
}

Status round_bf16_cuda(float* x, int64_t rows, int64_t ld, int64_t col0, int64_t col1, void* stream) {
  if (rows < 0 || col0 < 0 || col1 < col0 || col1 > ld)
    return Status::errorf("round_bf16_cuda: bad shape rows={} ld={} columns [{}, {})", rows, ld, col0, col1);
  if (rows == 0 || col1 == col0) return Status::ok();
  if (!x) return Status::error("round_bf16_cuda: null x");
  detail::launch_round_bf16(x, rows, ld, col0, col1, stream);
  DSI_CUDA_LAUNCHED("round_bf16_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
