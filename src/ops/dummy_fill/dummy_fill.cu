// Random dummy-weight fill on the GPU (see dummy_fill_cuda.h): a counter-based hash per element, so the result
// does not depend on the launch shape.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/small_float.h"
#include "ops/dummy_fill/dummy_fill_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_kernel(void* dst, size_t count, DummySpec spec, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x100000001b3ull ^ i);
    switch (spec.fill) {
      case DummyFill::Uniform: {
        const float u = float(r >> 40) * (1.0f / float(1 << 24));  // [0, 1)
        const float v = spec.center + spec.spread * (2.0f * u - 1.0f);
        if (spec.bf16) static_cast<uint16_t*>(dst)[i] = small_float::f32_to_bf16_bits(v);
        else static_cast<float*>(dst)[i] = v;
        break;
      }
      case DummyFill::Fp8Codes: {
        // sign | exponent 0..7 | mantissa: |value| <= 1.875, never the NaN code (exponent 15, mantissa 7).
        const uint8_t sign = uint8_t((r >> 8) & 1) << 7, exp = uint8_t((r >> 9) & 7) << 3, man = uint8_t((r >> 12) & 7);
        static_cast<uint8_t*>(dst)[i] = uint8_t(sign | exp | man);
        break;
      }
      case DummyFill::Fp4Codes:
        static_cast<uint8_t*>(dst)[i] = uint8_t(r >> 16);
        break;
      case DummyFill::Constant8:
        static_cast<uint8_t*>(dst)[i] = spec.byte_value;
        break;
    }
  }
}

}  // namespace

void launch_fill_dummy(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream) {
  const int threads = 256;
  const int blocks = int(std::min<size_t>((count + threads - 1) / threads, 65535));
  fill_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(dst, count, spec, seed);
}

}  // namespace dsinfer::ops::cuda::detail
