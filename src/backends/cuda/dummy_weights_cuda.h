// --load-format dummy: random weights generated directly on the GPU in the storage formats official
// DeepSeek-V4 releases use (model/weights.h official_storage), so full-size V4-Flash / V4-Pro configs run and
// can be timed without a download. Deterministic in (seed, tensor index). Plain header, no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace dsinfer::backends {

enum class DummyFill {
  Uniform,    // f32/bf16: uniform in [center - spread, center + spread]
  Fp8Codes,   // e4m3 bytes with |value| <= 1.875 (no NaN codes)
  Fp4Codes,   // packed e2m1 nibbles, any code
  Constant8,  // every byte = `byte_value` (E8M0 scales)
};

struct DummySpec {
  DummyFill fill = DummyFill::Uniform;
  bool bf16 = false;      // Uniform: write bf16 (else fp32)
  float center = 0.0f, spread = 0.02f;
  uint8_t byte_value = 127;
};

// Fills `count` elements (bytes for the code fills) at dst.
Status fill_dummy_cuda(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream);

}  // namespace dsinfer::backends
