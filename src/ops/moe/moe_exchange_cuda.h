// Device side of the expert dispatch of DP attention + EP (docs/multi_gpu.md "DP attention"; the bookkeeping is
// parallel/dispatch_plan.h, the sequence backends/cuda/parallel/expert_exchange_cuda.cpp): rows packed into the
// wire format of a collective and widened back, and the per-pair expert weights. Plain C++ header (no CUDA types).
#pragma once
#include <cstdint>

#include "core/status.h"

namespace dsinfer::ops::cuda {

// The element type of rows on the wire: fp32 (as computed), or bf16 rounded to nearest even (what the fast MoE
// kernels round their input to themselves, so a bf16 dispatch of their input loses nothing).
enum class WireType { kF32, kBf16 };
inline int64_t wire_bytes(WireType t) { return t == WireType::kBf16 ? 2 : 4; }

// out row p = x row rows[p] (rows null: row p) in the wire type, for p < n; x rows of `dim` floats.
Status pack_rows_cuda(const float* x, int64_t dim, const int32_t* rows, int64_t n, WireType type, void* out,
                      void* stream);
// out [n * dim] fp32 = the wire rows `in` widened (bf16 -> fp32 exactly; fp32 copied).
Status widen_rows_cuda(const void* in, int64_t n, int64_t dim, WireType type, float* out, void* stream);
// out[i] = value for i < n.
Status fill_cuda(float* out, int64_t n, float value, void* stream);

}  // namespace dsinfer::ops::cuda
