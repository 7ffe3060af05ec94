// The FP8 wire of DP attention's expert dispatch (docs/multi_gpu.md "FP8 dispatch"; DeepEP's low-latency format):
// a row of D values travels as D e4m3fn codes followed by one fp32 scale per block of 128 values (the last block may
// be shorter), 1.03 bytes per value at D = 4096 against 2 for bf16. Per block: amax = max |x|, s = amax / 448 (1 when
// amax is 0), code = e4m3(x / s) rounded to nearest even and saturated, and the receiver reads e4m3(code) * s. The
// host reference here defines the bits; the device kernels (backends/cuda/parallel/fp8_wire_cuda.h) must match it
// bit for bit (GpuFp8Wire.*). Host code; no CUDA.
#pragma once
#include <cstdint>

namespace dsinfer::parallel {

inline constexpr int64_t kFp8WireBlock = 128;
inline int64_t fp8_wire_scales(int64_t dim) { return (dim + kFp8WireBlock - 1) / kFp8WireBlock; }
inline int64_t fp8_wire_scale_offset(int64_t dim) { return (dim + 3) / 4 * 4; }  // the scales, 4-byte aligned
inline int64_t fp8_wire_row_bytes(int64_t dim) { return fp8_wire_scale_offset(dim) + 4 * fp8_wire_scales(dim); }

// One row of `dim` finite values -> fp8_wire_row_bytes(dim) bytes (padding bytes 0).
void fp8_wire_pack_ref(const float* x, int64_t dim, uint8_t* row);
// One packed row -> `dim` values.
void fp8_wire_unpack_ref(const uint8_t* row, int64_t dim, float* out);

}  // namespace dsinfer::parallel
