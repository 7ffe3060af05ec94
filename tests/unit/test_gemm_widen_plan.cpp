// CPU checks of the fast path's extra cuBLASLt routes (ops/gemm/gemm_widen_plan.h) at DeepSeek-V4.1-Flash shapes:
// FP8 weights of 32 x 32 UE8M0 blocks are widened to bf16 from the FP8 cuBLASLt threshold on, only in the fast mode
// and only where cuBLASLt's own block-scaled mode cannot take them; grouped BF16 weights (wo_a) go per group from
// kGemmGroupedLtMinM. The GPU side (the widening is exact, the widened GEMM right): tests/gpu/test_v41_fast_gpu.cpp.
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/gemm/gemm_widen_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::ops::KernelMode;

namespace {

DeviceWeight weight(WeightFormat f, int64_t rows, int64_t cols, int64_t block = 32) {
  DeviceWeight w;
  w.fmt = f;
  w.rows = rows;
  w.cols = cols;
  w.data = reinterpret_cast<const void*>(uintptr_t(1) << 20);
  w.scale = f == WeightFormat::FP8_BLOCK ? reinterpret_cast<const void*>(uintptr_t(1) << 21) : nullptr;
  w.block_n = w.block_k = block;
  return w;
}

TEST(GemmWidenPlan, V41FlashFp8WeightsWidenFromTheLtThreshold) {
  const GemmSettings s;
  // wq_a, wq_b, wkv, wo_b, indexer wq_b, Engram wkv of V4.1-Flash (32 x 32 blocks).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1280, 5120}, {32768, 1280}, {512, 5120}, {5120, 8192}, {4096, 1280},
                      {25600, 6144}}) {
    const DeviceWeight w = weight(WeightFormat::FP8_BLOCK, n, k);
    SCOPED_TRACE(testing::Message() << "[" << n << ", " << k << "]");
    EXPECT_TRUE(gemm_widen_supports(w));
    EXPECT_FALSE(gemm_lt_supports(w));
    EXPECT_FALSE(gemm_widen_wants(w, s.lt_min_m - 1, KernelMode::kFast, s));
    EXPECT_TRUE(gemm_widen_wants(w, s.lt_min_m, KernelMode::kFast, s));
    EXPECT_TRUE(gemm_widen_wants(w, 4096, KernelMode::kFast, s));
    for (KernelMode m : {KernelMode::kExact, KernelMode::kDefault, KernelMode::kBatchInvariant})
      EXPECT_FALSE(gemm_widen_wants(w, 4096, m, s)) << "only the fast mode widens";
  }
  GemmSettings off;
  off.cublaslt = false;
  EXPECT_FALSE(gemm_widen_wants(weight(WeightFormat::FP8_BLOCK, 32768, 1280), 4096, KernelMode::kFast, off));
  GemmSettings late;
  late.lt_min_m = 1024;  // DSINFER_CUBLASLT_MIN_M moves the widening with the FP8 threshold
  EXPECT_FALSE(gemm_widen_wants(weight(WeightFormat::FP8_BLOCK, 32768, 1280), 512, KernelMode::kFast, late));
  EXPECT_TRUE(gemm_widen_wants(weight(WeightFormat::FP8_BLOCK, 32768, 1280), 1024, KernelMode::kFast, late));
}

TEST(GemmWidenPlan, OnlyWeightsCublasLtCannotTakeAndCanTakeWidened) {
  const GemmSettings s;
  EXPECT_FALSE(gemm_widen_supports(weight(WeightFormat::FP8_BLOCK, 32768, 1024, 128))) << "V4's 128 x 128: cuBLASLt itself";
  EXPECT_FALSE(gemm_widen_supports(weight(WeightFormat::BF16, 1024, 1024)));
  EXPECT_FALSE(gemm_widen_supports(weight(WeightFormat::FP8_BLOCK, 1022, 1024))) << "N % 4";
  EXPECT_FALSE(gemm_widen_supports(weight(WeightFormat::FP8_BLOCK, 1024, 1020))) << "K % 8";
  DeviceWeight f32s = weight(WeightFormat::FP8_BLOCK, 1024, 1024);
  f32s.scale_e8m0 = false;
  EXPECT_FALSE(gemm_widen_supports(f32s)) << "fp32 scales: the widening would round";
  DeviceWeight none = weight(WeightFormat::FP8_BLOCK, 1024, 1024);
  none.data = nullptr;
  EXPECT_FALSE(gemm_widen_wants(none, 4096, KernelMode::kFast, s));
}

TEST(GemmWidenPlan, GroupedBf16WoAPerGroupAtPrefill) {
  const GemmSettings s;
  const DeviceWeight wo_a = weight(WeightFormat::BF16, 8 * 1024, 4096);  // V4.1-Flash: 8 groups of 1,024 x 4,096
  EXPECT_TRUE(gemm_grouped_bf16_lt_wants(wo_a, 8, kGemmGroupedLtMinM, KernelMode::kFast, s));
  EXPECT_FALSE(gemm_grouped_bf16_lt_wants(wo_a, 8, kGemmGroupedLtMinM - 1, KernelMode::kFast, s));
  EXPECT_FALSE(gemm_grouped_bf16_lt_wants(wo_a, 8, 4096, KernelMode::kBatchInvariant, s));
  EXPECT_FALSE(gemm_grouped_bf16_lt_wants(wo_a, 8, 4096, KernelMode::kExact, s));
  EXPECT_FALSE(gemm_grouped_bf16_lt_wants(wo_a, 3, 4096, KernelMode::kFast, s)) << "not whole groups";
  EXPECT_FALSE(gemm_grouped_bf16_lt_wants(weight(WeightFormat::FP8_BLOCK, 8192, 4096, 128), 8, 4096, KernelMode::kFast, s))
      << "FP8 groups: plan_gemm_grouped_call's";
  const DeviceWeight g3 = gemm_group_view_bf16(wo_a, 8, 3);
  EXPECT_EQ(g3.rows, 1024);
  EXPECT_EQ(g3.cols, 4096);
  EXPECT_EQ(static_cast<const uint8_t*>(g3.data) - static_cast<const uint8_t*>(wo_a.data), 3 * 1024 * 4096 * 2);
}

}  // namespace
