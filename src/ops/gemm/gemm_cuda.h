// Dense projections on the GPU: y[M,N] (+)= x[M,K] . W^T with fp32 activations and weights kept in their storage
// format (F32, BF16, FP8 e4m3 with block scales, FP4 e2m1 with 1x32 scales), dequantized inside the kernels.
// Plain C++ header (no CUDA types): streams are `void*` (a cudaStream_t), every function returns a Status.
// Layout: gemm_plan.h picks the kernel (every rule and threshold), gemm_cuda.cpp validates and launches,
// gemm_launch.h holds the parameters and launchers, the kernels are gemm_skinny.cu, gemm_tiled.cu, gemm_stream.cu
// and gemm_gemv.cu (device helpers gemm_dequant.cuh, index logic gemm_common.h).
// Paths (docs/kernels.md "GEMM and MoE", chosen by M, the format and GemmPrecision): rows <= kGemmSkinnyMaxM use
// an fp32 CUDA-core streaming kernel (exact fp32 products); larger M uses a bf16 mma.sync tensor-core kernel (x and
// dequantized W rounded to bf16, fp32 accumulation); with GemmPrecision::kBf16: M <= kGemmGemvMaxM with FP8 or BF16
// weights an fp32 GEMV kernel (gemm_gemv.cu, exact products), else FP8 weights and M <= 256 a bf16 streaming
// tensor-core kernel with split-K summed in a fixed order. No float atomics anywhere: results are
// deterministic run to run, and each output row depends only on its own x row and the path (and, on the kBf16
// path, on the launch shape chosen from M). GemmPrecision::kBatchInvariant chooses the path and the K split from
// the weight alone (gemm_plan.h gemm_invariant_plan), so a row's bits do not depend on M.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "cuda/device_buffer.h"
#include "ops/gemm/gemm_launch.h"  // WeightFormat, DeviceWeight
#include "ops/gemm/gemm_plan.h"    // GemmPrecision, kGemmSkinnyMaxM, the kernel choice

namespace dsinfer::ops::cuda {

const char* weight_format_name(WeightFormat f);

// Bytes of the data / scale arrays of a weight of this shape (what DeviceWeight points at).
size_t weight_data_bytes(WeightFormat f, int64_t rows, int64_t cols);
size_t weight_scale_bytes(WeightFormat f, int64_t rows, int64_t cols, bool scale_e8m0, int64_t block_n,
                          int64_t block_k);
// Shape/format/pointer checks of a weight (FP4 needs cols % 32 == 0, positive block sizes, non-null pointers).
Status validate_weight(const DeviceWeight& w, const char* what = "weight");

// y[M,N] (row stride ldy) (+)= x[M,K] (row stride ldx) * W^T, N = w.rows, K = w.cols. fp32 in/out, fp32
// accumulation. y must not overlap x. M == 0 is a no-op.
Status gemm_cuda(const float* x, int64_t M, int64_t ldx, const DeviceWeight& w, float* y, int64_t ldy, bool accumulate,
                 void* stream, GemmPrecision precision = GemmPrecision::kFp32SmallM);

// Batched over `groups` independent groups (the grouped output projection wo_a): with N_g = w.rows / groups,
// group g computes y_g[M, N_g] = x_g[M, K] * W[g*N_g : (g+1)*N_g, :]^T where x_g = x + g*x_group_stride and
// y_g = y + g*y_group_stride (rows of x_g / y_g at strides ldx / ldy). Overwrites y_g.
Status gemm_grouped_cuda(const float* x, int64_t M, int64_t ldx, int64_t x_group_stride, const DeviceWeight& w,
                         int64_t groups, float* y, int64_t ldy, int64_t y_group_stride, void* stream,
                         GemmPrecision precision = GemmPrecision::kFp32SmallM);

// One output of gemm_segments_cuda: y[M, w.rows] (row stride ldy) = out_scale * (x . w^T) (out_scale 1: the plain
// product; any other value: the product, then one multiply, the bits of gemm_cuda followed by scale_cuda).
struct GemmSegment {
  DeviceWeight w;
  float* y = nullptr;
  int64_t ldy = 0;
  float out_scale = 1.0f;
};
// Several weights over the same x[M, K] in one launch of the skinny or the streaming kernel, the one each weight's
// own gemm_cuda call at `precision` would take (gemm_plan.h plan_gemm_segments_kernel; plan_gemm_segments says when
// the runner may): each output then has the bits of that call. The weights share format, K and block sizes;
// 1..kGemmMaxSegments segments, none overlapping x. An error when the segments' own calls are not one such launch;
// other errors name the first bad segment.
Status gemm_segments_cuda(const float* x, int64_t M, int64_t ldx, const GemmSegment* segs, int count, void* stream,
                          GemmPrecision precision);

// A weight uploaded from host arrays in storage format (sizes from weight_data_bytes / weight_scale_bytes).
struct OwnedDeviceWeight {
  dsinfer::cuda::DeviceBuffer<uint8_t> data, scale;
  DeviceWeight w;
};
Result<OwnedDeviceWeight> upload_weight(WeightFormat fmt, int64_t rows, int64_t cols, const void* host_data,
                                        const void* host_scale, bool scale_e8m0 = true, int64_t block_n = 128,
                                        int64_t block_k = 128);

}  // namespace dsinfer::ops::cuda
