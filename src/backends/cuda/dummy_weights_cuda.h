// --load-format dummy: random weights generated directly on the GPU in the storage formats official
// DeepSeek-V4 releases use (model/weights.h official_storage), so full-size V4-Flash / V4-Pro configs run and
// can be timed without a download. Deterministic in (seed, tensor index). Plain header, no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/cuda/dummy_weights_launch.h"  // DummyFill, DummySpec
#include "core/status.h"

namespace dsinfer::backends {

// Fills `count` elements (bytes for the code fills) at dst: a counter-based hash per element, so the result does
// not depend on the launch shape.
Status fill_dummy_cuda(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream);

}  // namespace dsinfer::backends
