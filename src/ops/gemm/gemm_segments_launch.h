// Launch parameters of the skinny or the streaming kernel over several weights that read the same x
// (gemm_segments_cuda, gemm_cuda.h; kernels in gemm_skinny.cu and gemm_stream.cu; which one: gemm_plan.h
// plan_gemm_segments_kernel). Apart from gemm_launch.h so that the kernels that do not take segments (the MoE's) do
// not depend on it. No CUDA types.
#pragma once
#include <cstdint>

#include "ops/gemm/gemm_launch.h"
#include "ops/gemm/gemm_plan.h"  // kGemmMaxSegments

namespace dsinfer::ops::cuda::detail {

// Segment i holds blocks [block0, next block0) of the grid (skinny: blocks of gemm_skinny_rows_per_block rows;
// streaming: 64-row blocks, gd::kStRows, which the persistent grid walks), its own weight (same format, K and block
// sizes as the others), N, y, ldy and, where scaled, a factor its outputs are multiplied by after the sum.
struct GemmSegmentArgs {
  const uint8_t* wdata = nullptr;
  const uint8_t* wscale = nullptr;
  int64_t N = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  int block0 = 0;
  bool scaled = false;
  float out_scale = 1.0f;
};
struct GemmSegments {
  int count = 0, blocks = 0;  // blocks: all segments' blocks (the last segment ends there)
  GemmSegmentArgs seg[kGemmMaxSegments];
};

// The skinny kernel over GemmSegments (a: x, ldx, M, K and the shared weight facts; groups 1, no accumulate):
// returns the launch's cudaError_t as int (also check DSI_CUDA_LAUNCHED("gemm_skinny_segments_kernel")).
int launch_gemm_skinny_segments(WeightFormat f, const GemmArgs& a, const GemmSegments& s, void* stream);
// Weight rows per block of the skinny kernel (the segments' block0 are counted in these).
int64_t gemm_skinny_rows_per_block();
// The streaming kernel over GemmSegments (a: x, ldx, M, K and the shared weight facts; groups 1, no accumulate; p:
// the launch shape every segment's own call would take, row_grid over s.blocks): returns the launch's cudaError_t
// as int (also check DSI_CUDA_LAUNCHED("gemm_stream_segments_kernel")).
int launch_gemm_stream_segments(const GemmArgs& a, const StreamParams& p, const GemmSegments& s, void* stream);

}  // namespace dsinfer::ops::cuda::detail
