// An FP8 block-scaled weight widened to bf16 on the GPU (for cuBLASLt's dense GEMM where its block-scaled mode does
// not take the weight's blocks; when: gemm_widen_plan.h). out[n * K + k] = bf16(e4m3(w[n, k]) * scale(n / block_n,
// k / block_k)): exact for E8M0 scales (a power of two times a 4-bit significand fits bf16; NaN codes stay NaN).
// One thread per 4 weights (K % 4 == 0); per 16 under one scale when K and block_k are multiples of 16 and the
// data and out are 16-byte aligned (same values). Plain C++ header (no CUDA types).
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_widen_launch.h"  // DeviceWeight, the launcher

namespace dsinfer::ops::cuda {

// w: FP8_BLOCK with E8M0 scales; out: w.rows * w.cols bf16 values (out_elems of room). The returned view is the
// BF16 weight at out (same rows / cols), for gemm_cuda or the cuBLASLt engine.
Result<DeviceWeight> widen_fp8_bf16(const DeviceWeight& w, uint16_t* out, int64_t out_elems, void* stream);

}  // namespace dsinfer::ops::cuda
