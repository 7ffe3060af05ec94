// GPU parity of the FP8 -> bf16 widening (ops/gemm/gemm_widen_cuda.h; session 16 moved it to the hardware e4m3x2 ->
// f16x2 conversion) against its CPU reference, bit for bit: every one of the 256 e4m3 codes (NaN codes 0x7F / 0xFF,
// subnormals, signed zeros) under E8M0 scales from 2^-127 (products below bf16's range round to zero or a bf16
// subnormal, as the CPU's fp32 product rounded to bf16 does) to 2^127 and the NaN scale 0xFF, on 128 x 128 blocks
// (V4's weights: the flat 16-weights-a-thread kernel), on K = 1,024 (wq_b's short rows) and on a ragged K % 16 != 0
// shape with odd blocks (the 4-weights-a-thread kernel, pairs straddling scale blocks). The widening is exact, so the
// tolerance is zero: bf16 bits equal f32_to_bf16(e4m3 value x scale) of the CPU (NaN compared as NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtypes.h"
#include "cuda/gpu_test_util.h"
#include "ops/gemm/gemm_widen_cuda.h"

namespace {

using dsinfer::cuda::DeviceBuffer;
using dsinfer::cuda::test::to_device;
using dsinfer::cuda::test::to_host;
using dsinfer::ops::cuda::DeviceWeight;
using dsinfer::ops::cuda::WeightFormat;

// Widens an [N, K] weight of the given codes and per-block scale bytes and compares every element with the CPU.
void check_widen(int64_t N, int64_t K, int64_t bn, int64_t bk, const std::vector<uint8_t>& codes,
                 const std::vector<uint8_t>& scales) {
  SCOPED_TRACE(testing::Message() << "[" << N << ", " << K << "] blocks " << bn << "x" << bk);
  const int64_t kb = (K + bk - 1) / bk;
  auto dcodes = to_device(codes);
  auto dscales = to_device(scales);
  DeviceWeight w;
  w.fmt = WeightFormat::FP8_BLOCK;
  w.rows = N;
  w.cols = K;
  w.data = dcodes.data();
  w.scale = dscales.data();
  w.scale_e8m0 = true;
  w.block_n = bn;
  w.block_k = bk;
  DeviceBuffer<uint16_t> out;
  ASSERT_TRUE(out.alloc(size_t(N * K)).is_ok());
  const auto v = dsinfer::ops::cuda::widen_fp8_bf16(w, out.data(), N * K, nullptr);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got = to_host(out, size_t(N * K));
  int64_t bad = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const size_t i = size_t(n * K + k);
      const float want = dsinfer::e4m3_to_f32(codes[i]) * dsinfer::e8m0_to_f32(scales[size_t((n / bn) * kb + k / bk)]);
      const uint16_t g = got[i];
      const bool ok = std::isnan(want) ? std::isnan(dsinfer::bf16_to_f32(g)) : g == dsinfer::f32_to_bf16(want);
      if (!ok && bad++ < 5)
        ADD_FAILURE() << "element (" << n << ", " << k << ") code " << int(codes[i]) << ": got bf16 0x" << std::hex << g
                      << ", want 0x" << dsinfer::f32_to_bf16(want) << std::dec << " (" << want << ")";
    }
  EXPECT_EQ(bad, 0);
}

TEST(GemmWidenGpu, EveryCodeUnderExtremeScalesBitExact) {
  DSI_SKIP_WITHOUT_GPU();
  const uint8_t scale_bytes[] = {0, 1, 9, 100, 120, 127, 128, 200, 250, 254, 255};
  const int64_t ns = int64_t(sizeof(scale_bytes));
  // 128 x 128 blocks, K = 128 * ns: block column j takes scale_bytes[(j + row block) % ns]; every row holds all
  // 256 codes in its first 256 columns (rotated per row), so each code meets several scales.
  for (int64_t K : {int64_t(128) * ns, int64_t(1024)}) {
    const int64_t N = 256, kb = K / 128;
    std::vector<uint8_t> codes(size_t(N * K)), scales(size_t((N / 128) * kb));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) codes[size_t(n * K + k)] = uint8_t((k * 7 + n) & 0xFF);
    for (int64_t b = 0; b < N / 128; ++b)
      for (int64_t j = 0; j < kb; ++j) scales[size_t(b * kb + j)] = scale_bytes[size_t((j + 3 * b) % ns)];
    check_widen(N, K, 128, 128, codes, scales);
  }
  // Ragged: K % 16 != 0 (the 4-a-thread kernel) with odd 7 x 5 blocks (a pair straddles two scale blocks).
  const int64_t N = 21, K = 100, bn = 7, bk = 5, kb = (K + bk - 1) / bk;
  std::vector<uint8_t> codes(size_t(N * K)), scales(size_t(((N + bn - 1) / bn) * kb));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 13 + 5) & 0xFF);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = scale_bytes[i % size_t(ns)];
  check_widen(N, K, bn, bk, codes, scales);
}

}  // namespace
