// The FP8 wire of DP attention's expert dispatch on the device (parallel/fp8_wire.h defines the format and its host
// reference; these kernels match it bit for bit: GpuFp8Wire.*). Plain header (no CUDA types, no Status: the caller
// checks the launch).
#pragma once
#include <cstdint>

namespace dsinfer::backends::detail {

// Rows rows[j] (nullptr: j) of x [*, dim] fp32 -> n packed rows of parallel::fp8_wire_row_bytes(dim) bytes.
void launch_fp8_wire_pack(const float* x, int64_t dim, const int32_t* rows, int64_t n, uint8_t* out, void* stream);
// n packed rows -> out [n, dim] fp32.
void launch_fp8_wire_unpack(const uint8_t* in, int64_t n, int64_t dim, float* out, void* stream);

}  // namespace dsinfer::backends::detail
