// --load-format dummy: random weights generated directly on the GPU in the storage formats official
// DeepSeek-V4 releases use (model/tensor_table.h official_storage), so full-size V4-Flash / V4-Pro configs run and
// can be timed without a download. Deterministic in (seed, tensor index); the fill kernel is ops/dummy_fill. Plain
// header, no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/weights/device_weights.h"  // DevTensor
#include "core/status.h"
#include "model/tensor_table.h"

namespace dsinfer::backends {

// Bytes the tensors take in their official storage formats (vectors and tables as 4-byte elements).
double dummy_weight_bytes(const std::vector<model::TensorSpec>& specs);

// One tensor of the table in its official storage format, filled by role: norm weights ~1, mHC scales ~1, other
// vectors small around 0, matrices ~ 1/sqrt(fan_in) (FP8 / FP4 codes with E8M0 scales of that size), tid2eid rows
// of distinct expert ids in [0, experts).
Result<DevTensor> make_dummy_tensor(const model::TensorSpec& spec, int64_t experts, uint64_t seed, void* stream);

}  // namespace dsinfer::backends
