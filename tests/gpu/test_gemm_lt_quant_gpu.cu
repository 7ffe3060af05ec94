// The activation quantization's hardware conversions (ops/gemm/gemm_lt_quant.cuh codes4 / residual4, the kernels'
// own code) against the software arithmetic they replace (gemm_lt_quant.h quantize / residual, the host reference's),
// exhaustively: every fp32 bit pattern as an activation (NaN, inf, subnormals and both zeros included), at scales
// from act_scale's smallest (2^-22) to its largest (2^120) and inf (an inf amax). Codes must be equal and residuals
// bitwise equal (any NaN equal to any NaN: the second term quantizes every NaN to 0x7F). Plain CUDA runtime.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "ops/gemm/gemm_lt_quant.cuh"

namespace {

namespace lt = ::dsinfer::ops::gemm_lt;

constexpr uint64_t kPatterns = uint64_t(1) << 32;

// out[0]: mismatching codes, out[1]: mismatching residuals, out[2]: the smallest mismatching pattern (~0: none).
__global__ void quant_hw_kernel(float sc, unsigned long long* out) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x * 4;
  for (uint64_t base = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4; base < kPatterns; base += stride) {
    float v[4];
    for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(uint32_t(base + uint64_t(i)));
    const uint32_t word = lt::codes4(v, sc);
    float r[4];
    lt::residual4(v, word, sc, r);
    for (int i = 0; i < 4; ++i) {
      const uint8_t want = lt::quantize(v[i], sc), got = uint8_t(word >> (8 * i));
      const float rw = lt::residual(v[i], want, sc);
      const bool code_ok = got == want;
      const bool res_ok = (r[i] != r[i] && rw != rw) || __float_as_uint(r[i]) == __float_as_uint(rw);
      if (!code_ok) atomicAdd(out, 1ull);
      if (!res_ok) atomicAdd(out + 1, 1ull);
      if (!code_ok || !res_ok) atomicMin(out + 2, static_cast<unsigned long long>(base + uint64_t(i)));
    }
  }
}

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace

TEST(GemmLtQuantGpu, HardwareCodesEqualQuantize) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  unsigned long long* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 3 * sizeof(unsigned long long)), cudaSuccess);
  const float scales[] = {std::ldexp(1.0f, -22), 0.125f, 1.0f, 128.0f, std::ldexp(1.0f, 120),
                          std::numeric_limits<float>::infinity()};
  // act_scale's range: the floor and FLT_MAX give the two ends, an inf amax gives inf.
  EXPECT_EQ(lt::act_scale(0.0f), scales[0]);
  EXPECT_EQ(lt::act_scale(std::numeric_limits<float>::max()), scales[4]);
  EXPECT_EQ(lt::act_scale(std::numeric_limits<float>::infinity()), scales[5]);
  for (float sc : scales) {
    const unsigned long long init[3] = {0, 0, ~0ull};
    ASSERT_EQ(cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice), cudaSuccess);
    quant_hw_kernel<<<132 * 16, 256>>>(sc, d);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    unsigned long long h[3] = {};
    ASSERT_EQ(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h[0], 0ull) << "codes differ at scale " << sc << " (first pattern 0x" << std::hex << h[2] << ")";
    EXPECT_EQ(h[1], 0ull) << "residuals differ at scale " << sc << " (first pattern 0x" << std::hex << h[2] << ")";
    std::printf("scale %g: %llu patterns, %llu code / %llu residual mismatches\n", double(sc),
                static_cast<unsigned long long>(kPatterns), h[0], h[1]);
  }
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}
