// Parameters and kernel launcher behind dummy_fill_cuda.h (no CUDA types, no Status; validated by
// dummy_fill_cuda.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::ops::cuda {

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

namespace detail {
// dummy_fill.cu ("fill_dummy_kernel").
void launch_fill_dummy(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
