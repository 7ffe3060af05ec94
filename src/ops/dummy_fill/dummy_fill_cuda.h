// The dummy-weight fill (--load-format dummy): `count` elements of one storage format, random by a counter-based
// hash of (seed, element), so the result does not depend on the launch shape. Plain header, no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "ops/dummy_fill/dummy_fill_launch.h"  // DummyFill, DummySpec

namespace dsinfer::ops::cuda {

// Fills `count` elements (bytes for the code fills) at dst.
Status fill_dummy_cuda(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream);

}  // namespace dsinfer::ops::cuda
