// The device forms of the numerics simulations' rounding steps (session 38) against the forms they replace, written
// out here as the reference, exhaustively over every fp32 bit pattern (NaN, inf, subnormals and both zeros included):
// core/small_float.h round_small_float (e2m1 and e4m3: exponent and quantum read off the bits, a multiplication by the
// quantum's exact reciprocal) against frexpf / ldexpf / __fdiv_rn; cuda/ops_device.cuh pow2_scale (the exponent
// difference read off the bits) against the double ratio's frexp, for the simulations' two qmax; div_pow2 against
// __fdiv_rn at power-of-two scales from 2^-149 to 2^127. Results must be bitwise equal (any NaN equal to any NaN).
// Plain CUDA runtime.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/small_float.h"
#include "cuda/ops_device.cuh"

namespace {

namespace dev = ::dsinfer::cuda::dev;
namespace sf = ::dsinfer::small_float;

constexpr uint64_t kPatterns = uint64_t(1) << 32;

__device__ bool same(float a, float b) { return (a != a && b != b) || __float_as_uint(a) == __float_as_uint(b); }

// The device form before session 38.
__device__ float round_frexp_form(float f, int M, int B, float maxv) {
  float a = fabsf(f);
  if (a >= maxv) a = maxv;
  int e = 0;
  frexpf(a, &e);
  int unbiased = e - 1;
  const int min_exp = 1 - B;
  if (a == 0.0f || unbiased < min_exp) unbiased = min_exp;
  const float quantum = ldexpf(1.0f, unbiased - M);
  float r = __fmul_rn(rintf(__fdiv_rn(a, quantum)), quantum);
  if (r > maxv) r = maxv;
  return copysignf(r, f);
}

__device__ float pow2_double_form(float amax, float qmax) {
  const double r = double(amax) / double(qmax);
  int E = 0;
  const double f = frexp(r, &E);
  return ldexpf(1.0f, f == 0.5 ? E - 1 : E);
}

// out[0]: mismatches, out[1]: the smallest mismatching pattern (~0: none). what: 0 e2m1, 1 e4m3, 2 pow2_scale (qmax
// = arg), 3 div_pow2 (s = arg).
__global__ void compare_kernel(int what, float arg, unsigned long long* out) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t p = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < kPatterns; p += stride) {
    const float v = __uint_as_float(uint32_t(p));
    bool ok = true;
    if (what == 0) ok = same(sf::round_small_float(v, 1, 1, 6.0f), round_frexp_form(v, 1, 1, 6.0f));
    if (what == 1) ok = same(sf::round_small_float(v, 3, 7, 448.0f), round_frexp_form(v, 3, 7, 448.0f));
    if (what == 2 && !(v < 0.0f)) ok = same(dev::pow2_scale(v, arg), pow2_double_form(v, arg));
    if (what == 3) ok = same(dev::div_pow2(v, arg), __fdiv_rn(v, arg));
    if (!ok) {
      atomicAdd(out, 1ull);
      atomicMin(out + 1, static_cast<unsigned long long>(p));
    }
  }
}

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Mismatches of one comparison over all patterns (the first one's pattern into *first).
unsigned long long mismatches(int what, float arg, unsigned long long* first) {
  unsigned long long* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 2 * sizeof(unsigned long long)), cudaSuccess);
  const unsigned long long init[2] = {0, ~0ull};
  EXPECT_EQ(cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice), cudaSuccess);
  compare_kernel<<<132 * 16, 256>>>(what, arg, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  unsigned long long h[2] = {};
  EXPECT_EQ(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  *first = h[1];
  return h[0];
}

}  // namespace

TEST(GpuSmallFloat, RoundingEqualsFrexpForm) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (int what : {0, 1}) {
    unsigned long long first = 0;
    EXPECT_EQ(mismatches(what, 0.0f, &first), 0ull) << (what ? "e4m3" : "e2m1") << " first pattern 0x" << std::hex
                                                    << first;
  }
}

TEST(GpuSmallFloat, Pow2ScaleEqualsDoubleForm) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (float qmax : {6.0f, 448.0f, 1.0f, 7.5f}) {
    unsigned long long first = 0;
    EXPECT_EQ(mismatches(2, qmax, &first), 0ull) << "qmax " << qmax << " first pattern 0x" << std::hex << first;
  }
}

TEST(GpuSmallFloat, DivPow2EqualsDivision) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (int k : {-149, -127, -126, -40, -1, 0, 1, 20, 126, 127}) {
    unsigned long long first = 0;
    EXPECT_EQ(mismatches(3, std::ldexp(1.0f, k), &first), 0ull) << "s = 2^" << k << " first pattern 0x" << std::hex
                                                                << first;
  }
}
