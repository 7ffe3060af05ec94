// CPU checks of the GEMM kernel choice (ops/gemm/gemm_plan.h): the kernel each V4-Flash and shipped-model
// projection gets per mode and M, the environment settings, the cuBLASLt routing rule, and the invariants the kernels
// and the speculative path rely on (a verify row takes the kernel of a decode row; one K warp where rows must match;
// exact mode stays on the fp32 kernel; legal launch shapes). The GPU side (that the kernels compute what the plan
// says) is tests/gpu/test_gemm_*_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/gemm/gemm_plan.h"

using namespace dsinfer::ops::cuda;
using dsinfer::Result;
using dsinfer::ops::KernelMode;
namespace od = dsinfer::ops::cuda::detail;

namespace {

// The settings of these variable values, which must be valid.
GemmSettings settings(const char* cublaslt, const char* min_m, const char* act) {
  Result<GemmSettings> s = gemm_settings_from(cublaslt, min_m, act);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? s.value() : GemmSettings{};
}


constexpr int kSms = 132;  // H200

// A weight on a fake 16-byte aligned address (the plans read pointers only for null / alignment).
DeviceWeight weight(WeightFormat f, int64_t rows, int64_t cols) {
  DeviceWeight w;
  w.fmt = f;
  w.rows = rows;
  w.cols = cols;
  w.data = reinterpret_cast<const void*>(uintptr_t(1) << 20);
  const bool scaled = f == WeightFormat::FP8_BLOCK || f == WeightFormat::FP4_G32;
  w.scale = scaled ? reinterpret_cast<const void*>(uintptr_t(1) << 21) : nullptr;
  return w;
}
DeviceWeight fp8(int64_t N, int64_t K) { return weight(WeightFormat::FP8_BLOCK, N, K); }
DeviceWeight bf16(int64_t N, int64_t K) { return weight(WeightFormat::BF16, N, K); }

// What runs for one projection call of M rows: "lt" (cuBLASLt) or the kernel of the first gemm_cuda chunk.
enum class Ran { kLt, kSkinny, kTiled, kStream, kGemv };

const char* name(Ran r) {
  switch (r) {
    case Ran::kLt: return "lt";
    case Ran::kSkinny: return "skinny";
    case Ran::kTiled: return "tiled";
    case Ran::kStream: return "stream";
    case Ran::kGemv: return "gemv";
  }
  return "?";
}

Ran ran(const DeviceWeight& w, int64_t M, KernelMode mode, const GemmSettings& s = GemmSettings{},
        int64_t groups = 1) {
  const GemmCallPlan c =
      groups > 1 ? plan_gemm_grouped_call(w, groups, M, mode, s) : plan_gemm_call(w, M, mode, s);
  if (c.lt) return Ran::kLt;
  od::GemmArgs a;
  a.M = std::min(c.chunk_rows, M);
  a.groups = groups;
  a.N = w.rows / groups;
  a.K = w.cols;
  a.ldx = w.cols;
  a.x = reinterpret_cast<const float*>(uintptr_t(1) << 22);
  od::set_weight_args(a, w);
  od::set_x_vec(a);
  switch (plan_gemm_kernel(a, w.fmt, c.precision, kSms).kernel) {
    case GemmKernel::kSkinny: return Ran::kSkinny;
    case GemmKernel::kTiled: return Ran::kTiled;
    case GemmKernel::kStream: return Ran::kStream;
    case GemmKernel::kGemv: return Ran::kGemv;
  }
  return Ran::kTiled;
}

struct Shape {
  const char* what;
  DeviceWeight w;
  int64_t groups;
};

// V4-Flash (configs/deepseek-v4-flash/config.json: D 4096, 64 heads x 512, q/o lora 1024, 8 o-groups, experts'
// inter 2048, vocab 129280; FP8 128 x 128 blocks) and the shipped model (models/dsv4-small/config.json: D 256,
// 4 heads x 64, q/o lora 128, 2 o-groups, vocab 3072).
std::vector<Shape> flash_shapes() {
  return {{"wq_a", fp8(1024, 4096), 1},         {"wkv", fp8(512, 4096), 1},
          {"wq_b", fp8(32768, 1024), 1},        {"wo_a", fp8(8192, 4096), 8},
          {"wo_b", fp8(4096, 8192), 1},         {"shared w1", fp8(2048, 4096), 1},
          {"shared w2", fp8(4096, 2048), 1},    {"lm head", bf16(129280, 4096), 1}};
}
std::vector<Shape> small_shapes() {
  return {{"wq_a", fp8(128, 256), 1}, {"wq_b", fp8(256, 128), 1}, {"wo_a", fp8(256, 128), 2},
          {"wo_b", fp8(256, 256), 1}, {"lm head", bf16(3072, 256), 1}};
}

void expect_ran(const Shape& s, int64_t M, KernelMode mode, Ran want, const GemmSettings& st = GemmSettings{}) {
  const Ran got = ran(s.w, M, mode, st, s.groups);
  EXPECT_EQ(got, want) << s.what << " M=" << M << ": got " << name(got) << ", want " << name(want);
}

}  // namespace

// The fast path on V4-Flash, by M: GEMV for N > 1024 and wo_a and the streaming kernel for N <= 1024 at decode and
// verify sizes; the streaming kernel for N <= 4096 at M = 17..128; cuBLASLt for FP8 from M = 64 (wo_a from 17),
// for the BF16 lm head from M = 9; the default kernels elsewhere.
TEST(GemmPlan, FlashFastPathKernels) {
  const std::vector<Shape> f = flash_shapes();
  const Shape &wq_a = f[0], &wkv = f[1], &wq_b = f[2], &wo_a = f[3], &wo_b = f[4], &w1 = f[5], &lm = f[7];
  for (int64_t M : {1, 2, 8, 16}) {
    expect_ran(wq_a, M, KernelMode::kFast, Ran::kStream);
    expect_ran(wkv, M, KernelMode::kFast, Ran::kStream);
    expect_ran(wq_b, M, KernelMode::kFast, Ran::kGemv);
    expect_ran(wo_a, M, KernelMode::kFast, Ran::kGemv);
    expect_ran(wo_b, M, KernelMode::kFast, Ran::kGemv);
    expect_ran(w1, M, KernelMode::kFast, Ran::kGemv);
  }
  for (int64_t M : {1, 8}) expect_ran(lm, M, KernelMode::kFast, Ran::kGemv);
  for (int64_t M : {9, 16, 64, 4096}) expect_ran(lm, M, KernelMode::kFast, Ran::kLt);
  expect_ran(wo_b, 32, KernelMode::kFast, Ran::kStream);
  expect_ran(w1, 63, KernelMode::kFast, Ran::kStream);
  expect_ran(wq_b, 32, KernelMode::kFast, Ran::kStream);
  expect_ran(wq_a, 63, KernelMode::kFast, Ran::kStream);
  for (const Shape* s : {&wq_a, &wkv, &wq_b, &wo_b, &w1}) {
    const bool small_n = s == &wq_a || s == &wkv;  // N <= 1024: the streaming kernel up to M = 128 (session 14)
    expect_ran(*s, 63, KernelMode::kFast, Ran::kStream);
    expect_ran(*s, 64, KernelMode::kFast, small_n ? Ran::kStream : Ran::kLt);
    expect_ran(*s, 128, KernelMode::kFast, small_n ? Ran::kStream : Ran::kLt);
    expect_ran(*s, 129, KernelMode::kFast, Ran::kLt);
    expect_ran(*s, 4096, KernelMode::kFast, Ran::kLt);
  }
  // wo_a: the GEMV kernel up to 16 rows, then the engine's batched grouped call (session 15) at every larger M.
  for (int64_t M : {17, 64, 256, 1023, 1024, 4096}) expect_ran(wo_a, M, KernelMode::kFast, Ran::kLt);
}

// DSINFER_CUBLASLT=0 and DSINFER_CUBLASLT_MIN_M move only the cuBLASLt decisions.
TEST(GemmPlan, SettingsMoveOnlyTheCublasLtChoice) {
  const std::vector<Shape> f = flash_shapes();
  const Shape &wq_a = f[0], &wo_a = f[3], &wo_b = f[4], &lm = f[7];
  const GemmSettings off = settings("0", nullptr, nullptr);
  expect_ran(wo_b, 64, KernelMode::kFast, Ran::kStream, off);
  expect_ran(wo_b, 512, KernelMode::kFast, Ran::kTiled, off);
  expect_ran(wq_a, 200, KernelMode::kFast, Ran::kStream, off);
  expect_ran(lm, 9, KernelMode::kFast, Ran::kGemv, off);  // the verify range keeps the decode kernel
  expect_ran(lm, 17, KernelMode::kFast, Ran::kTiled, off);
  expect_ran(wo_a, 4096, KernelMode::kFast, Ran::kTiled, off);
  const GemmSettings late = settings(nullptr, "128", nullptr);
  expect_ran(wo_b, 64, KernelMode::kFast, Ran::kStream, late);
  expect_ran(wo_b, 127, KernelMode::kFast, Ran::kStream, late);
  expect_ran(wo_b, 128, KernelMode::kFast, Ran::kLt, late);
  expect_ran(lm, 9, KernelMode::kFast, Ran::kLt, late);  // the dense threshold is not the override's
  for (int64_t M : {1, 16}) expect_ran(wo_b, M, KernelMode::kFast, Ran::kGemv, off);
}

// Exact mode: chunks of kGemmSkinnyMaxM rows on the fp32 skinny kernel for every projection, never cuBLASLt;
// kDefault (V4.1 runner, drafter): kFp32SmallM in one call - skinny at M <= 8, tiled above, never cuBLASLt.
TEST(GemmPlan, ExactAndDefaultModes) {
  std::vector<Shape> all = flash_shapes();
  for (const Shape& s : small_shapes()) all.push_back(s);
  for (const Shape& s : all)
    for (int64_t M : {1, 7, 8, 9, 64, 1000}) {
      const GemmCallPlan c = s.groups > 1 ? plan_gemm_grouped_call(s.w, s.groups, M, KernelMode::kExact, GemmSettings{})
                                          : plan_gemm_call(s.w, M, KernelMode::kExact, GemmSettings{});
      EXPECT_EQ(c.chunk_rows, kGemmSkinnyMaxM) << s.what;
      EXPECT_EQ(c.precision, GemmPrecision::kFp32SmallM) << s.what;
      EXPECT_FALSE(c.lt_prepare) << s.what;
      expect_ran(s, M, KernelMode::kExact, Ran::kSkinny);
      expect_ran(s, M, KernelMode::kDefault, M <= kGemmSkinnyMaxM ? Ran::kSkinny : Ran::kTiled);
    }
  // A weight without 16-byte vectors (K not a multiple of a vector) has no skinny kernel: tiled even in exact mode.
  const Shape odd{"odd K", bf16(256, 100), 1};
  expect_ran(odd, 1, KernelMode::kExact, Ran::kTiled);
}

// Batch-invariant mode: one call, the kernel from the weight (the same at every M), never cuBLASLt.
TEST(GemmPlan, BatchInvariantKernelIgnoresM) {
  std::vector<Shape> all = flash_shapes();
  for (const Shape& s : small_shapes()) all.push_back(s);
  for (const Shape& s : all) {
    const Ran first = ran(s.w, 1, KernelMode::kBatchInvariant, GemmSettings{}, s.groups);
    EXPECT_NE(first, Ran::kLt) << s.what;
    EXPECT_NE(first, Ran::kGemv) << s.what;
    for (int64_t M : {2, 9, 64, 257, 4096}) expect_ran(s, M, KernelMode::kBatchInvariant, first);
  }
  const std::vector<Shape> f = flash_shapes();
  expect_ran(f[0], 100, KernelMode::kBatchInvariant, Ran::kStream);  // wq_a
  expect_ran(f[2], 100, KernelMode::kBatchInvariant, Ran::kTiled);   // wq_b: N > 4096
  expect_ran(f[3], 100, KernelMode::kBatchInvariant, Ran::kTiled);   // wo_a: grouped
  expect_ran(f[7], 100, KernelMode::kBatchInvariant, Ran::kTiled);   // lm head: N > 1024
  expect_ran(small_shapes()[4], 100, KernelMode::kBatchInvariant, Ran::kTiled);  // shipped lm head: N = 3072
  expect_ran(Shape{"router", bf16(256, 4096), 1}, 100, KernelMode::kBatchInvariant, Ran::kSkinny);
}

// A speculative verify step (1 + k <= kGemmGemvMaxM rows) must run each row through the kernel of a 1-row decode
// step: on the fast path the kernel at every M <= kGemmGemvMaxM is the kernel at M = 1, and the lm head (it decides
// greedy tokens) stays off cuBLASLt for verify steps of up to kGemmSkinnyMaxM rows.
TEST(GemmPlan, VerifyRowsTakeTheDecodeKernel) {
  std::vector<Shape> all = flash_shapes();
  for (const Shape& s : small_shapes()) all.push_back(s);
  for (const Shape& s : all) {
    const Ran decode = ran(s.w, 1, KernelMode::kFast, GemmSettings{}, s.groups);
    for (int64_t M = 2; M <= kGemmGemvMaxM; ++M) {
      if (s.w.fmt == WeightFormat::BF16 && M > kGemmSkinnyMaxM) break;  // cuBLASLt from kGemmLtMinMDense
      expect_ran(s, M, KernelMode::kFast, decode);
    }
  }
  EXPECT_GT(kGemmLtMinMDense, kGemmSkinnyMaxM);
  EXPECT_GT(GemmSettings{}.lt_min_m, kGemmGemvMaxM);
}

// The plan of a weight shape at M rows, on a fake 16-byte aligned weight (moved from tests/gpu: host only).
od::GemvParams gemv_plan_of(const DeviceWeight& w, int64_t groups, int64_t M) {
  od::GemmArgs a;
  a.M = M;
  a.groups = groups;
  a.N = w.rows / groups;
  a.K = w.cols;
  od::set_weight_args(a, w);
  od::GemvParams p;
  EXPECT_TRUE(od::plan_gemm_gemv(a, w.fmt, kSms, p)) << "N=" << a.N << " K=" << a.K << " M=" << M;
  return p;
}
od::GemvParams gemv_plan_for(WeightFormat f, int64_t groups, int64_t Ng, int64_t K, int64_t M) {
  return gemv_plan_of(weight(f, groups * Ng, K), groups, M);
}
// A GEMV weight shape: `groups` groups of Ng rows x K.
struct GemvShape {
  WeightFormat f;
  int64_t groups, Ng, K;
};

// With one warp on K a lane sums the same weight vectors in the same order at every M (the vectors per lane only
// change how K is chunked), so a row's bits do not depend on M; a K split over warps that changes with M changes
// them. Which shapes keep one K warp at every M: the shipped model's GEMV weights (lm head, grouped wo_a) and
// V4-Flash wq_b, grouped wo_a and the lm head; the Flash shared expert is the documented exception (wk 4 at
// M <= 2, 2 at M = 3..8). tests/gpu/test_gemm_gemv_gpu.cpp GemvGpu.OneKWarpRowsBitEqualAtEveryM checks the bits.
TEST(GemvPlan, OneKWarpAtEveryMWhereRowsMustMatchDecode) {
  using S = GemvShape;
  for (S s : {S{WeightFormat::BF16, 1, 3072, 256}, S{WeightFormat::FP8_BLOCK, 2, 128, 128},
              S{WeightFormat::BF16, 2, 128, 128}, S{WeightFormat::FP8_BLOCK, 1, 32768, 1024},
              S{WeightFormat::FP8_BLOCK, 8, 1024, 4096}, S{WeightFormat::BF16, 1, 129280, 4096}})
    for (int64_t M = 1; M <= kGemmGemvMaxM; ++M)
      EXPECT_EQ(gemv_plan_for(s.f, s.groups, s.Ng, s.K, M).wk, 1)
          << "groups=" << s.groups << " N=" << s.Ng << " K=" << s.K << " M=" << M;
  EXPECT_EQ(gemv_plan_for(WeightFormat::FP8_BLOCK, 1, 2048, 4096, 1).wk, 4);
  EXPECT_EQ(gemv_plan_for(WeightFormat::FP8_BLOCK, 1, 2048, 4096, 3).wk, 2);
}

// The whole-tile GEMV form (GemvParams::even; tests/gpu GemvGpu.EvenTilesGiveTheGeneralFormsBits checks its bits):
// every V4-Flash decode shape up to kGemvEvenMaxMt x rows, with the shifts of its power-of-two sizes; not 16 rows,
// nor rows or K that leave a partial tile (the shipped model's K of 128 / 256 is below one warp step), fp32 scales,
// or scale blocks that are not powers of two.
TEST(GemvPlan, EvenWhereTilesAreWhole) {
  using S = GemvShape;
  for (S s : {S{WeightFormat::FP8_BLOCK, 1, 32768, 1024}, S{WeightFormat::FP8_BLOCK, 1, 4096, 8192},
              S{WeightFormat::FP8_BLOCK, 8, 1024, 4096}, S{WeightFormat::FP8_BLOCK, 1, 2048, 4096},
              S{WeightFormat::FP8_BLOCK, 1, 4096, 2048}, S{WeightFormat::FP8_BLOCK, 1, 576, 4096},
              S{WeightFormat::BF16, 1, 129280, 4096}, S{WeightFormat::BF16, 1, 1024, 512},
              S{WeightFormat::FP8_BLOCK, 2, 128, 1024}})
    for (int64_t M = 1; M <= kGemmGemvMaxM; ++M) {
      const od::GemvParams p = gemv_plan_for(s.f, s.groups, s.Ng, s.K, M);
      EXPECT_EQ(p.even, p.mt <= od::kGemvEvenMaxMt) << "groups=" << s.groups << " N=" << s.Ng << " K=" << s.K
                                                    << " M=" << M;
      EXPECT_EQ(1 << p.kc_shift, p.kc);
      if (s.f == WeightFormat::FP8_BLOCK) {
        EXPECT_EQ(p.bn_shift, 7);
        EXPECT_EQ(p.bk_shift, 7);
      }
    }
  EXPECT_FALSE(gemv_plan_for(WeightFormat::FP8_BLOCK, 1, 333, 4096, 1).even);  // a partial row tile
  EXPECT_FALSE(gemv_plan_for(WeightFormat::FP8_BLOCK, 1, 4096, 2064, 1).even);  // a partial K chunk
  EXPECT_FALSE(gemv_plan_for(WeightFormat::BF16, 1, 77, 1000, 1).even);
  EXPECT_FALSE(gemv_plan_for(WeightFormat::BF16, 1, 3072, 256, 1).even);  // the shipped lm head: K below one step
  EXPECT_FALSE(gemv_plan_for(WeightFormat::FP8_BLOCK, 2, 128, 128, 1).even);  // the shipped wo_a
  DeviceWeight f32s = fp8(4096, 4096);
  f32s.scale_e8m0 = false;
  DeviceWeight odd_block = fp8(4096, 4096);
  odd_block.block_n = 96;
  for (const DeviceWeight& w : {f32s, odd_block})
    EXPECT_FALSE(gemv_plan_of(w, 1, 1).even) << "e8m0 " << w.scale_e8m0 << " block_n " << w.block_n;
}

// Every GEMV and streaming plan the fast path can produce is a legal launch: GEMV blocks of <= 8 warps, x rows a
// power of two >= M, shared memory within the 48 KB default; streaming clusters of 1..8 non-empty K splits whose x
// tile fits kGemmStreamXsMax and whose token blocks cover M.
TEST(GemmPlan, LaunchShapesAreLegal) {
  for (WeightFormat f : {WeightFormat::FP8_BLOCK, WeightFormat::BF16})
    for (int64_t N : {64, 128, 512, 1024, 2048, 4096, 32768, 129280})
      for (int64_t K : {128, 256, 1024, 2048, 4096, 8192})
        for (int64_t M = 1; M <= kGemmGemvMaxM; ++M) {
          const od::GemvParams p = gemv_plan_for(f, 1, N, K, M);
          EXPECT_LE(p.wk * p.wr, od::kGemvMaxWarps);
          EXPECT_GE(p.mt, M);
          EXPECT_EQ(p.mt & (p.mt - 1), 0);
          EXPECT_LE(p.smem, 48 * 1024);
          EXPECT_GT(p.kc, 0);
        }
  for (int64_t N : {64, 512, 1024, 4096, 32768})
    for (int64_t K : {256, 1024, 4096, 8192, 16384})
      for (int64_t M : {1, 7, 8, 9, 33, 64, 65, 128, 255, 256}) {
        od::GemmArgs a;
        a.M = M;
        a.N = N;
        a.K = K;
        od::set_weight_args(a, fp8(N, K));
        od::StreamParams p;
        ASSERT_TRUE(od::plan_gemm_stream(a, WeightFormat::FP8_BLOCK, kSms, p)) << N << "x" << K << " M=" << M;
        const int64_t kblocks = K / 128;
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, 8);
        EXPECT_GE(int64_t(p.splits) * p.kb_per_split, kblocks);
        EXPECT_LT(int64_t(p.splits - 1) * p.kb_per_split, kblocks);
        EXPECT_LE(gemm_stream_xs_bytes(p.tokens, p.kb_per_split, 128), kGemmStreamXsMax);
        EXPECT_GE(int64_t(p.tokens) * p.token_chunks, M);
        // Persistent grid: at least one block per row-block column, never more columns than row blocks, and the
        // resident blocks (2 per SM) at most fill the GPU when the row blocks exceed them (no partial second wave).
        const int64_t row_blocks = (N + 63) / 64, others = int64_t(p.splits) * p.token_chunks;
        EXPECT_GE(p.row_grid, 1);
        EXPECT_LE(p.row_grid, row_blocks);
        if (p.row_grid < row_blocks && others <= kGemmStreamBlocksPerSm * kSms) {
          EXPECT_LE(p.row_grid * others, kGemmStreamBlocksPerSm * kSms);
        }
        const int64_t chunks = int64_t(p.kb_per_split) * 128 / 64;
        EXPECT_EQ(p.depth, p.tokens >= 32 || chunks % 8 != 0 ? 4 : 8);
      }
  // The row grid: all row blocks when they fit; else balanced (every block walks the same count +-1) at <= 2 per SM;
  // fewer when the shared memory allows one block per SM.
  EXPECT_EQ(gemm_stream_row_grid(16, 8, 80 * 1024, 132), 16);
  EXPECT_EQ(gemm_stream_row_grid(512, 2, 84 * 1024, 132), 128);   // wq_b M = 64: 4 row blocks per block
  EXPECT_EQ(gemm_stream_row_grid(512, 2, 150 * 1024, 132), 64);   // one block per SM: 66 columns cap, 8 each
  EXPECT_EQ(gemm_stream_row_grid(64, 16, 80 * 1024, 132), 16);    // wo_b M = 64: 17 columns cap, 4 row blocks each
  EXPECT_EQ(gemm_stream_row_grid(5, 1000, 80 * 1024, 132), 1);
  EXPECT_EQ(gemm_stream_depth(4, 128), 8);
  EXPECT_EQ(gemm_stream_depth(3, 128), 4);
  EXPECT_EQ(gemm_stream_depth(1, 256), 4);
  // Outside its range the streaming kernel is not planned: M > kGemmStreamMaxM, BF16, MoE gathers.
  od::GemmArgs a;
  a.M = kGemmStreamMaxM + 1;
  a.N = 1024;
  a.K = 4096;
  od::set_weight_args(a, fp8(1024, 4096));
  od::StreamParams p;
  EXPECT_FALSE(od::plan_gemm_stream(a, WeightFormat::FP8_BLOCK, kSms, p));
  a.M = 4;
  EXPECT_FALSE(od::plan_gemm_stream(a, WeightFormat::BF16, kSms, p));
  const int32_t rows[1] = {0};
  a.x_rows = rows;
  EXPECT_FALSE(od::plan_gemm_stream(a, WeightFormat::FP8_BLOCK, kSms, p));
}

// The environment overrides: unset / empty keep the defaults, DSINFER_CUBLASLT=0 turns cuBLASLt off,
// DSINFER_CUBLASLT_ACT=fp8 selects one activation term; any other value of the three is an error naming the variable
// (a mistyped override used to fall back to the default silently).
TEST(GemmPlan, SettingsFromEnvironmentValues) {
  const GemmSettings d = settings(nullptr, nullptr, nullptr);
  EXPECT_TRUE(d.cublaslt);
  EXPECT_EQ(d.lt_min_m, 64);
  EXPECT_EQ(d.lt_activations, GemmLtActivations::kAuto);
  EXPECT_FALSE(settings("0", nullptr, nullptr).cublaslt);
  EXPECT_TRUE(settings("1", nullptr, nullptr).cublaslt);
  EXPECT_TRUE(settings("", nullptr, nullptr).cublaslt);
  EXPECT_EQ(settings(nullptr, "16", nullptr).lt_min_m, 16);
  EXPECT_EQ(settings(nullptr, "", nullptr).lt_min_m, 64);
  EXPECT_EQ(settings(nullptr, nullptr, "fp8").lt_activations, GemmLtActivations::kFp8);
  EXPECT_EQ(settings(nullptr, nullptr, "fp8x2").lt_activations, GemmLtActivations::kFp8x2);
  EXPECT_EQ(settings(nullptr, nullptr, "bf16").lt_activations, GemmLtActivations::kBf16);
  EXPECT_EQ(settings(nullptr, nullptr, "auto").lt_activations, GemmLtActivations::kAuto);
  for (const char* bad : {"0", "-4", "12x", "abc", "99999999999999999999"}) {
    const Result<GemmSettings> s = gemm_settings_from(nullptr, bad, nullptr);
    ASSERT_FALSE(s.is_ok()) << "'" << bad << "'";
    EXPECT_NE(s.status().message().find("DSINFER_CUBLASLT_MIN_M"), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find(bad), std::string::npos) << s.status().message();
  }
  for (const char* bad : {"yes", "2", "off"})
    EXPECT_FALSE(gemm_settings_from(bad, nullptr, nullptr).is_ok()) << "DSINFER_CUBLASLT='" << bad << "'";
  for (const char* bad : {"FP8", "BF16", "fp8x3", "wide"})
    EXPECT_FALSE(gemm_settings_from(nullptr, nullptr, bad).is_ok()) << "DSINFER_CUBLASLT_ACT='" << bad << "'";
}

// How the engine computes an FP8 call (session 16, issue 30): kAuto widens E8M0 weights to bf16 from
// kGemmLtWideMinM rows (every V4-Flash dense projection at prefill sizes) and keeps two FP8 terms below (decode
// batches); monotone in M (the engine sizes its buffers for the largest M of a graph capture); fp32 scales never
// widen (not exact); an explicit setting is kept (kBf16 only where the widening is exact).
TEST(GemmPlan, CublasLtFp8Route) {
  using A = GemmLtActivations;
  DeviceWeight f32s = fp8(32768, 1024);
  f32s.scale_e8m0 = false;
  for (const DeviceWeight& w : {fp8(1024, 4096), fp8(32768, 1024), fp8(512, 4096), fp8(4096, 8192), fp8(2048, 4096)}) {
    SCOPED_TRACE(testing::Message() << "[" << w.rows << ", " << w.cols << "]");
    for (int64_t M : {64, 256}) EXPECT_EQ(gemm_lt_fp8_route(w, M, A::kAuto), A::kFp8x2) << M;
    for (int64_t M : {4096, 8192}) EXPECT_EQ(gemm_lt_fp8_route(w, M, A::kAuto), A::kBf16) << M;
    bool wide = false;
    for (int64_t M = 1; M <= 16384; M += 1 + M / 8) {
      const bool now = gemm_lt_fp8_route(w, M, A::kAuto) == A::kBf16;
      EXPECT_TRUE(now || !wide) << "not monotone at M = " << M;
      wide = now;
    }
    EXPECT_EQ(gemm_lt_fp8_route(w, 64, A::kBf16), A::kBf16);
    EXPECT_EQ(gemm_lt_fp8_route(w, 8192, A::kFp8x2), A::kFp8x2);
    EXPECT_EQ(gemm_lt_fp8_route(w, 8192, A::kFp8), A::kFp8);
  }
  EXPECT_EQ(gemm_lt_fp8_route(fp8(32768, 1024), kGemmLtWideMinM - 1, A::kAuto), A::kFp8x2);
  EXPECT_EQ(gemm_lt_fp8_route(fp8(32768, 1024), kGemmLtWideMinM, A::kAuto), A::kBf16);
  // The FP8 buffers a prepare for max_rows sizes: the largest call below it that stays on an FP8 route.
  const DeviceWeight w = fp8(32768, 1024);
  EXPECT_EQ(gemm_lt_fp8_max_rows(w, 256, A::kAuto), 256);
  EXPECT_EQ(gemm_lt_fp8_max_rows(w, 8192, A::kAuto), kGemmLtWideMinM - 1);
  EXPECT_EQ(gemm_lt_fp8_max_rows(w, 8192, A::kBf16), 0);
  EXPECT_EQ(gemm_lt_fp8_max_rows(w, 8192, A::kFp8x2), 8192);
  EXPECT_EQ(gemm_lt_fp8_max_rows(f32s, 8192, A::kAuto), 8192);
  EXPECT_EQ(gemm_lt_fp8_max_rows(w, 0, A::kAuto), 0);
  for (int64_t max_rows : {1, 64, 1023, 1024, 4096})
    for (int64_t M = 1; M <= max_rows; M += 1 + M / 4) {
      if (gemm_lt_fp8_route(w, M, A::kAuto) != A::kBf16) {
        EXPECT_LE(M, gemm_lt_fp8_max_rows(w, max_rows, A::kAuto)) << max_rows;
      }
    }
  EXPECT_EQ(gemm_lt_fp8_route(f32s, 8192, A::kAuto), A::kFp8x2);
  EXPECT_EQ(gemm_lt_fp8_route(f32s, 8192, A::kBf16), A::kFp8x2);
}

// Session 23: the two-term route's stacked form (one matmul over 2 M rows): DSINFER_CUBLASLT_STACK's values, the
// default, and kAuto's rule (M <= kGemmLtStackMaxM, N <= kGemmLtStackMaxN: wq_a, wkv, wo_b at decode sizes, not
// wq_b), monotone in M below the limit (the engine sizes its product buffer for the largest stacked call).
TEST(GemmPlan, CublasLtTwoTermsStacked) {
  using S = GemmLtStack;
  EXPECT_EQ(GemmSettings{}.lt_stack, kGemmLtStackDefault);
  EXPECT_EQ(gemm_settings_from(nullptr, nullptr, nullptr, nullptr, nullptr).value().lt_stack, kGemmLtStackDefault);
  EXPECT_EQ(gemm_settings_from(nullptr, nullptr, nullptr, nullptr, "0").value().lt_stack, S::kOff);
  EXPECT_EQ(gemm_settings_from(nullptr, nullptr, nullptr, nullptr, "auto").value().lt_stack, S::kAuto);
  EXPECT_EQ(gemm_settings_from(nullptr, nullptr, nullptr, nullptr, "all").value().lt_stack, S::kAll);
  for (const char* bad : {"1", "on", "AUTO", "0 "}) {
    const Result<GemmSettings> r = gemm_settings_from(nullptr, nullptr, nullptr, nullptr, bad);
    ASSERT_FALSE(r.is_ok()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("DSINFER_CUBLASLT_STACK"), std::string::npos) << r.status().message();
  }
  for (int64_t N : {512, 1024, 4096}) {
    EXPECT_TRUE(gemm_lt_fp8x2_stacked(64, N, S::kAuto)) << N;
    EXPECT_TRUE(gemm_lt_fp8x2_stacked(kGemmLtStackMaxM, N, S::kAuto)) << N;
    EXPECT_FALSE(gemm_lt_fp8x2_stacked(kGemmLtStackMaxM + 1, N, S::kAuto)) << N;
    EXPECT_FALSE(gemm_lt_fp8x2_stacked(64, N, S::kOff)) << N;
  }
  EXPECT_FALSE(gemm_lt_fp8x2_stacked(64, 32768, S::kAuto));
  EXPECT_TRUE(gemm_lt_fp8x2_stacked(64, 32768, S::kAll));
  EXPECT_FALSE(gemm_lt_fp8x2_stacked(kGemmLtStackMaxM + 1, 1024, S::kAll));
  EXPECT_FALSE(gemm_lt_fp8x2_stacked(0, 1024, S::kAll));
  for (S st : {S::kAuto, S::kAll})
    for (int64_t N : {1024, 32768})
      for (int64_t M = 2; M <= kGemmLtStackMaxM; ++M)
        if (gemm_lt_fp8x2_stacked(M, N, st)) {
          EXPECT_TRUE(gemm_lt_fp8x2_stacked(M - 1, N, st)) << M;
        }
}

// The cuBLASLt routing rule (moved from tests/gpu/test_gemm_lt_dense_gpu.cpp: host only): BF16 from
// kGemmLtMinMDense rows, FP8 from the settings' threshold; FP4, non-128 FP8 blocks and odd N never.
TEST(GemmPlan, CublasLtRoutingRule) {
  const GemmSettings s;
  const DeviceWeight b = bf16(256, 512), f = fp8(256, 512), q = weight(WeightFormat::FP4_G32, 256, 512);
  EXPECT_FALSE(gemm_lt_wants(b, kGemmLtMinMDense - 1, s));
  EXPECT_TRUE(gemm_lt_wants(b, kGemmLtMinMDense, s));
  EXPECT_FALSE(gemm_lt_wants(f, s.lt_min_m - 1, s));
  EXPECT_TRUE(gemm_lt_wants(f, s.lt_min_m, s));
  EXPECT_FALSE(gemm_lt_supports(q));
  EXPECT_FALSE(gemm_lt_wants(q, 4096, s));
  DeviceWeight blocks64 = fp8(256, 512);
  blocks64.block_n = blocks64.block_k = 64;
  EXPECT_FALSE(gemm_lt_supports(blocks64));
  EXPECT_FALSE(gemm_lt_supports(fp8(264, 512)));   // N % 16 != 0
  EXPECT_FALSE(gemm_lt_supports(fp8(256, 520)));   // K % 128 != 0
  EXPECT_TRUE(gemm_lt_supports(bf16(8080, 4096)));  // N % 4 == 0 suffices for BF16
  DeviceWeight no_scale = fp8(256, 512);
  no_scale.scale = nullptr;
  EXPECT_FALSE(gemm_lt_supports(no_scale));
  // A grouped FP8 weight goes through the engine's batched call (widened to bf16: any whole groups of rows % 4 == 0
  // with E8M0 scales, K % 8 == 0); grouped BF16 weights are V4.1's (gemm_widen_plan.h).
  EXPECT_TRUE(plan_gemm_grouped_call(fp8(8192, 4096), 8, 1024, KernelMode::kFast, s).lt);
  EXPECT_TRUE(plan_gemm_grouped_call(fp8(8 * 192, 4096), 8, 1024, KernelMode::kFast, s).lt);
  EXPECT_FALSE(plan_gemm_grouped_call(fp8(8 * 190, 4096), 8, 1024, KernelMode::kFast, s).lt);  // 190 % 4 != 0
  EXPECT_FALSE(plan_gemm_grouped_call(fp8(8192, 4100), 8, 1024, KernelMode::kFast, s).lt);     // K % 8 != 0
  EXPECT_FALSE(plan_gemm_grouped_call(fp8(8192, 4096), 1, 1024, KernelMode::kFast, s).lt);     // one group
  EXPECT_FALSE(plan_gemm_grouped_call(bf16(8192, 4096), 8, 1024, KernelMode::kFast, s).lt);
  DeviceWeight f32_scales = fp8(8192, 4096);
  f32_scales.scale_e8m0 = false;  // the widening is exact only for E8M0 scales
  EXPECT_FALSE(plan_gemm_grouped_call(f32_scales, 8, 1024, KernelMode::kFast, s).lt);
  EXPECT_TRUE(gemm_lt_grouped_supports(bf16(8192, 4096), 8));  // the engine takes it; the V4 plan does not send it
  for (KernelMode m : {KernelMode::kExact, KernelMode::kBatchInvariant, KernelMode::kDefault})
    EXPECT_FALSE(plan_gemm_grouped_call(fp8(8192, 4096), 8, 1024, m, s).lt);
  EXPECT_FALSE(plan_gemm_grouped_call(fp8(8192, 4096), 8, kGemmGroupedBatchedMinM - 1, KernelMode::kFast, s).lt);
  EXPECT_TRUE(plan_gemm_grouped_call(fp8(8192, 4096), 8, kGemmGroupedBatchedMinM, KernelMode::kFast, s).lt);
}

// plan_gemm_segments (V4's compressor and indexer projections of y in one skinny launch): only where each weight's
// own call is one skinny-kernel call under one precision - decode rows (M <= kGemmSkinnyMaxM; above it the BF16
// weights go to cuBLASLt or the tiled kernel) and batch-invariant mode at any M; never mixed formats or K, exact
// mode past one chunk, or DSINFER_GEMM_SEGMENTS=0. wq_a + wkv: SegmentsStreamWhereBothStreamWithOneLaunchShape.
TEST(GemmPlan, SegmentsOnlyWhereEveryWeightRunsTheSkinnyKernelAlone) {
  const DeviceWeight cw = bf16(1024, 4096), cg = bf16(1024, 4096), iw = bf16(64, 4096), ik = bf16(256, 4096),
                     ig = bf16(256, 4096), hw = bf16(512, 4096);
  const DeviceWeight* csa[] = {&cw, &cg, &iw, &ik, &ig};
  const DeviceWeight* hca[] = {&hw, &hw};
  const GemmSettings on{};
  for (const KernelMode mode : {KernelMode::kFast, KernelMode::kDefault, KernelMode::kExact}) {
    for (int64_t M = 1; M <= kGemmSkinnyMaxM; ++M) {
      EXPECT_TRUE(plan_gemm_segments(csa, 5, M, mode, on, kSms).one_launch) << "M=" << M << " mode " << int(mode);
      EXPECT_TRUE(plan_gemm_segments(hca, 2, M, mode, on, kSms).one_launch) << "M=" << M;
      for (const DeviceWeight* w : csa) EXPECT_EQ(ran(*w, M, mode), Ran::kSkinny) << "M=" << M;
    }
    for (int64_t M : {9, 16, 64, 4096})
      EXPECT_FALSE(plan_gemm_segments(csa, 5, M, mode, on, kSms).one_launch) << "M=" << M << " mode " << int(mode);
  }
  for (int64_t M : {1, 9, 64, 300, 4096}) {
    const GemmSegmentsPlan p = plan_gemm_segments(csa, 5, M, KernelMode::kBatchInvariant, on, kSms);
    EXPECT_TRUE(p.one_launch) << "M=" << M;
    EXPECT_EQ(p.precision, GemmPrecision::kBatchInvariant);
  }
  EXPECT_EQ(plan_gemm_segments(csa, 5, 1, KernelMode::kFast, on, kSms).precision, GemmPrecision::kBf16);
  const DeviceWeight qa = fp8(1024, 4096);
  // Mixed format / K, one or too many segments, no rows, the switch off.
  const DeviceWeight k2 = bf16(256, 2048);
  const DeviceWeight* mixed[] = {&cw, &qa};
  const DeviceWeight* mixed_k[] = {&cw, &k2};
  EXPECT_FALSE(plan_gemm_segments(mixed, 2, 1, KernelMode::kDefault, on, kSms).one_launch);
  EXPECT_FALSE(plan_gemm_segments(mixed_k, 2, 1, KernelMode::kDefault, on, kSms).one_launch);
  EXPECT_FALSE(plan_gemm_segments(csa, 1, 1, KernelMode::kFast, on, kSms).one_launch);
  const DeviceWeight* nine[] = {&cw, &cw, &cw, &cw, &cw, &cw, &cw, &cw, &cw};
  EXPECT_FALSE(plan_gemm_segments(nine, 9, 1, KernelMode::kFast, on, kSms).one_launch);
  EXPECT_FALSE(plan_gemm_segments(csa, 5, 0, KernelMode::kFast, on, kSms).one_launch);
  GemmSettings off;
  off.segments = false;
  EXPECT_FALSE(plan_gemm_segments(csa, 5, 1, KernelMode::kFast, off, kSms).one_launch);
  // DSINFER_GEMM_SEGMENTS: 0 / skinny / 1 / unset; anything else is an error naming the variable.
  EXPECT_TRUE(gemm_settings_from(nullptr, nullptr, nullptr, nullptr).value().segments);
  EXPECT_TRUE(gemm_settings_from(nullptr, nullptr, nullptr, nullptr).value().segments_stream);
  EXPECT_FALSE(gemm_settings_from(nullptr, nullptr, nullptr, "0").value().segments);
  EXPECT_TRUE(gemm_settings_from(nullptr, nullptr, nullptr, "1").value().segments);
  EXPECT_TRUE(gemm_settings_from(nullptr, nullptr, nullptr, "1").value().segments_stream);
  EXPECT_TRUE(gemm_settings_from(nullptr, nullptr, nullptr, "skinny").value().segments);
  EXPECT_FALSE(gemm_settings_from(nullptr, nullptr, nullptr, "skinny").value().segments_stream);
  EXPECT_TRUE(plan_gemm_segments(csa, 5, 1, KernelMode::kFast,
                                 gemm_settings_from(nullptr, nullptr, nullptr, "skinny").value(), kSms).one_launch);
  for (const char* bad : {"yes", "2", "off", "stream"}) {
    const Result<GemmSettings> s = gemm_settings_from(nullptr, nullptr, nullptr, bad);
    ASSERT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.status().message().find("DSINFER_GEMM_SEGMENTS"), std::string::npos);
  }
}

namespace {

// wq_a + wkv (V4-Flash: FP8, K = 4,096, N = 1,024 / 512) in one streaming launch (plan_gemm_segments_kernel): in fast
// mode at every M whose own calls both stream (1..kGemmStreamMidMaxM; from 129 rows cuBLASLt takes them), with one
// launch shape (the K split of N = 1,024 and of N = 512 agree at every such M on 132 SMs); the row grid spans both
// weights' 64-row blocks. Exact / default mode at M <= 8: the skinny segments (both weights skinny alone).
// Batch-invariant mode, DSINFER_GEMM_SEGMENTS=skinny, and weights whose own K splits differ: separate launches.
TEST(GemmPlan, SegmentsStreamWhereBothStreamWithOneLaunchShape) {
  const DeviceWeight qa = fp8(1024, 4096), kv = fp8(512, 4096);
  const DeviceWeight* qkv[] = {&qa, &kv};
  const GemmSettings on{};
  for (int64_t M = 1; M <= kGemmStreamMidMaxM; ++M) {
    const GemmSegmentsPlan p = plan_gemm_segments(qkv, 2, M, KernelMode::kFast, on, kSms);
    ASSERT_TRUE(p.one_launch) << "M=" << M;
    EXPECT_EQ(p.kernel, GemmKernel::kStream) << "M=" << M;
    EXPECT_EQ(p.precision, GemmPrecision::kBf16) << "M=" << M;
    EXPECT_EQ(ran(qa, M, KernelMode::kFast), Ran::kStream) << "M=" << M;
    EXPECT_EQ(ran(kv, M, KernelMode::kFast), Ran::kStream) << "M=" << M;
    // The fused launch shape: each weight's own but the row grid, which covers 24 row blocks within the residency.
    od::GemmArgs a[2];
    for (int i = 0; i < 2; ++i) {
      a[i] = od::GemmArgs{.M = M, .N = qkv[i]->rows, .K = 4096};
      od::set_weight_args(a[i], *qkv[i]);
    }
    const GemmSegmentsKernelPlan k = plan_gemm_segments_kernel(a, 2, WeightFormat::FP8_BLOCK, p.precision, kSms);
    ASSERT_TRUE(k.ok);
    od::StreamParams own;
    ASSERT_TRUE(od::plan_gemm_stream(a[1], WeightFormat::FP8_BLOCK, kSms, own));
    EXPECT_EQ(k.stream.splits, own.splits);
    EXPECT_EQ(k.stream.tokens, own.tokens);
    EXPECT_EQ(k.stream.kb_per_split, own.kb_per_split);
    EXPECT_GE(k.stream.row_grid, 1);
    EXPECT_LE(k.stream.row_grid, 24);
    EXPECT_LE(int64_t(k.stream.row_grid) * k.stream.splits * k.stream.token_chunks, 2 * kSms) << "M=" << M;
  }
  for (int64_t M : {129, 256, 4096})
    EXPECT_FALSE(plan_gemm_segments(qkv, 2, M, KernelMode::kFast, on, kSms).one_launch) << "M=" << M;
  for (const KernelMode mode : {KernelMode::kExact, KernelMode::kDefault}) {
    const GemmSegmentsPlan p = plan_gemm_segments(qkv, 2, 8, mode, on, kSms);
    EXPECT_TRUE(p.one_launch);
    EXPECT_EQ(p.kernel, GemmKernel::kSkinny);
    EXPECT_FALSE(plan_gemm_segments(qkv, 2, 9, mode, on, kSms).one_launch);
  }
  EXPECT_FALSE(plan_gemm_segments(qkv, 2, 1, KernelMode::kBatchInvariant, on, kSms).one_launch);
  GemmSettings skinny;
  skinny.segments_stream = false;
  EXPECT_FALSE(plan_gemm_segments(qkv, 2, 1, KernelMode::kFast, skinny, kSms).one_launch);
  // K = 1,024 (8 scale blocks) at M = 1: N = 64 splits K 8 ways, N = 16,384 2 ways (256 row blocks fill the SMs).
  const DeviceWeight small = fp8(64, 1024), big = fp8(16384, 1024);
  od::GemmArgs d[2];
  d[0] = od::GemmArgs{.M = 1, .N = 64, .K = 1024};
  d[1] = od::GemmArgs{.M = 1, .N = 16384, .K = 1024};
  od::set_weight_args(d[0], small);
  od::set_weight_args(d[1], big);
  EXPECT_FALSE(plan_gemm_segments_kernel(d, 2, WeightFormat::FP8_BLOCK, GemmPrecision::kBf16, kSms).ok);
}

}  // namespace
