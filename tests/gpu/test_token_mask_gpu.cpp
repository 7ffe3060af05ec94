// GPU parity: the structured-output token bitmask (ops/token_mask) against the CPU sampler's own mask step
// (sampling::apply_token_bitmask). The kernel writes -inf or leaves a logit alone, no arithmetic: outputs must
// be bitwise equal (NaN == NaN for poisoned padding), so the tolerance is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attn_test_util.h"
#include "ops/token_mask/token_mask_cuda.h"
#include "sampling/sampler.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;

namespace {

// Words of every kind: all allowed, none allowed, a single bit (first / last lane), random.
std::vector<int32_t> random_mask(size_t rows, int32_t words, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> m(rows * size_t(words));
  for (auto& w : m) {
    switch (g() % 5) {
      case 0: w = -1; break;
      case 1: w = 0; break;
      case 2: w = int32_t(1u << (g() % 32)); break;
      case 3: w = int32_t(0x80000001u); break;
      default: w = int32_t(g());
    }
  }
  return m;
}

// The CPU reference over the same layout: mask row m -> logits row row_ids[m] (or m).
void reference(std::vector<float>& logits, int64_t V, int64_t stride, const std::vector<int32_t>& mask, int32_t W,
               const std::vector<int32_t>& row_ids, int64_t rows) {
  for (int64_t m = 0; m < rows; ++m) {
    const int64_t r = row_ids.empty() ? m : row_ids[size_t(m)];
    sampling::apply_token_bitmask(std::span<float>(logits.data() + r * stride, size_t(V)),
                                  std::span<const int32_t>(mask.data() + m * W, size_t(W)));
  }
}

void check(int64_t V, int64_t stride, int32_t W, int64_t logits_rows, const std::vector<int32_t>& row_ids,
           int64_t mask_rows, uint32_t seed) {
  std::vector<float> logits = random_vec(size_t(logits_rows * stride), seed, 8.0f);
  for (int64_t r = 0; r < logits_rows; ++r)
    for (int64_t i = V; i < stride; ++i) logits[size_t(r * stride + i)] = NAN;  // padding must stay untouched
  const std::vector<int32_t> mask = random_mask(size_t(mask_rows), W, seed + 1);
  std::vector<float> want = logits;
  reference(want, V, stride, mask, W, row_ids, mask_rows);
  auto dl = to_device(logits);
  auto dm = to_device(mask);
  cuda::DeviceBuffer<int32_t> dr;
  if (!row_ids.empty()) dr = to_device(row_ids);
  ASSERT_TRUE(ops::cuda::apply_token_bitmask(dl.data(), V, stride, dm.data(), W, row_ids.empty() ? nullptr : dr.data(),
                                             mask_rows, nullptr)
                  .is_ok());
  const std::vector<float> got = to_host(dl, logits.size());
  int64_t bad = 0, masked = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += !same(got[i], want[i]);
    masked += std::isinf(want[i]);
  }
  EXPECT_EQ(bad, 0) << "V " << V << " stride " << stride << " W " << W;
  EXPECT_GT(masked, 0);  // the case does mask something
}

}  // namespace

TEST(GpuTokenMask, MatchesTheCpuSamplerMaskOnTheV4Vocabulary) {
  DSI_SKIP_WITHOUT_GPU();
  const int64_t V = 129280;
  check(V, V, sampling::bitmask_words(V), 5, {}, 5, 1);
}

TEST(GpuTokenMask, RowIdsStrideAndIdsPastTheMask) {
  DSI_SKIP_WITHOUT_GPU();
  // Mask rows applied to logits rows {6, 1, 3} of 8; the others untouched; rows padded to a stride > V.
  check(3072, 3100, sampling::bitmask_words(3072), 8, {6, 1, 3}, 3, 2);
  // V not a multiple of 32, and a mask shorter than the vocabulary: ids past it are disallowed.
  check(1000, 1000, sampling::bitmask_words(1000), 4, {}, 4, 3);
  check(1000, 1000, 20, 4, {}, 4, 4);
}

TEST(GpuTokenMask, BadArgumentsAreErrors) {
  DSI_SKIP_WITHOUT_GPU();
  auto dl = to_device(std::vector<float>(64, 0.0f));
  auto dm = to_device(std::vector<int32_t>(2, -1));
  EXPECT_FALSE(ops::cuda::apply_token_bitmask(dl.data(), 0, 64, dm.data(), 2, nullptr, 1, nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::apply_token_bitmask(dl.data(), 64, 32, dm.data(), 2, nullptr, 1, nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::apply_token_bitmask(dl.data(), 64, 64, nullptr, 2, nullptr, 1, nullptr).is_ok());
  EXPECT_FALSE(ops::cuda::apply_token_bitmask(dl.data(), 64, 64, dm.data(), 0, nullptr, 1, nullptr).is_ok());
  EXPECT_TRUE(ops::cuda::apply_token_bitmask(dl.data(), 64, 64, dm.data(), 2, nullptr, 1, nullptr).is_ok());
  EXPECT_EQ(to_host(dl, 64), std::vector<float>(64, 0.0f));  // all allowed: nothing written
}
