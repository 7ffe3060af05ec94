// CPU checks of the batch-invariant mode's host decisions (docs/kernels.md "Batch invariance"): the GEMM kernel and
// K split as functions of the weight alone (ops/gemm/gemm_plan.h), the fixed-size attention key splits
// (sparse_attention_launch.h: the same key ranges and combine count for any grid split count), the fixed mHC split
// (mhc_launch.h), and the engine option on the cpu backend (a no-op: same outputs). The GPU side is
// tests/gpu/test_batch_invariant_gpu.cpp.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "dsinfer/engine.h"
#include "ops/gemm/gemm_plan.h"
#include "ops/mhc/mhc_launch.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "test_util.h"

using namespace dsinfer::ops::cuda;

namespace {

GemmWeightShape fp8(int64_t N, int64_t K) {
  GemmWeightShape w;
  w.fmt = WeightFormat::FP8_BLOCK;
  w.N = N;
  w.K = K;
  w.block_k = 128;
  w.w_vec = true;
  return w;
}

GemmWeightShape bf16(int64_t N, int64_t K) {
  GemmWeightShape w;
  w.fmt = WeightFormat::BF16;
  w.N = N;
  w.K = K;
  w.w_vec = true;
  return w;
}

}  // namespace

// V4-Flash and shipped-model shapes: FP8 N <= 4096 stream, small other weights skinny, the rest tiled.
TEST(BatchInvariantGemm, KernelFollowsTheWeightShape) {
  EXPECT_EQ(gemm_invariant_plan(fp8(1024, 4096), 132).kernel, GemmKernel::kStream);   // wq_a
  EXPECT_EQ(gemm_invariant_plan(fp8(512, 4096), 132).kernel, GemmKernel::kStream);    // wkv
  EXPECT_EQ(gemm_invariant_plan(fp8(4096, 8192), 132).kernel, GemmKernel::kStream);   // wo_b
  EXPECT_EQ(gemm_invariant_plan(fp8(32768, 1024), 132).kernel, GemmKernel::kTiled);   // wq_b
  EXPECT_EQ(gemm_invariant_plan(bf16(256, 4096), 132).kernel, GemmKernel::kSkinny);   // router gate
  EXPECT_EQ(gemm_invariant_plan(bf16(129280, 4096), 132).kernel, GemmKernel::kTiled); // lm head
  GemmWeightShape grouped = fp8(1024, 4096);
  grouped.groups = 8;  // wo_a
  EXPECT_EQ(gemm_invariant_plan(grouped, 132).kernel, GemmKernel::kTiled);
  GemmWeightShape gathered = bf16(64, 256);
  gathered.gathered = true;
  EXPECT_EQ(gemm_invariant_plan(gathered, 132).kernel, GemmKernel::kTiled);
  GemmWeightShape unaligned = fp8(512, 4096);
  unaligned.w_vec = false;  // no 16-byte vectors: neither streaming nor skinny
  EXPECT_EQ(gemm_invariant_plan(unaligned, 132).kernel, GemmKernel::kTiled);
  GemmWeightShape odd_k = fp8(512, 4128);  // K % 64 != 0: not streamable, small N: skinny
  EXPECT_EQ(gemm_invariant_plan(odd_k, 132).kernel, GemmKernel::kSkinny);
}

// Every streaming plan is a valid fixed K partition, and every M in 1..kGemmStreamMaxM gets a legal tile under it
// (tokens per block only move rows between blocks).
TEST(BatchInvariantGemm, StreamPartitionIsValidForEveryM) {
  for (int64_t N : {64, 128, 256, 512, 1024, 2048, 4096})
    for (int64_t K : {256, 1024, 2048, 4096, 7168, 8192, 16384})
      for (int sms : {1, 78, 132}) {
        const GemmInvariantPlan p = gemm_invariant_plan(fp8(N, K), sms);
        ASSERT_EQ(p.kernel, GemmKernel::kStream) << N << "x" << K;
        const int64_t kblocks = (K + 127) / 128;
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, 8);  // a thread-block cluster
        EXPECT_GE(int64_t(p.splits) * p.kb_per_split, kblocks);
        EXPECT_LT(int64_t(p.splits - 1) * p.kb_per_split, kblocks);  // no empty split
        EXPECT_LE(gemm_stream_xs_bytes(8, p.kb_per_split, 128), kGemmStreamXsMax);
        for (int64_t M = 1; M <= kGemmStreamMaxM; ++M) {
          const int t = gemm_invariant_stream_tokens(M, p.kb_per_split, 128);
          ASSERT_TRUE(t == 8 || t == 16 || t == 32 || t == 64) << M << ": " << t;
          EXPECT_LE(gemm_stream_xs_bytes(t, p.kb_per_split, 128), kGemmStreamXsMax);
        }
      }
  // Decode keeps its parallelism: wq_a (16 row blocks, 32 scale blocks) and wo_b (64, 64) on 132 SMs take the
  // 8-split cap (the default plan's choice at M = 1); a 4096 x 256 weight (2 scale blocks) at most 2.
  EXPECT_EQ(gemm_invariant_plan(fp8(1024, 4096), 132).splits, 8);
  EXPECT_EQ(gemm_invariant_plan(fp8(4096, 8192), 132).splits, 8);
  EXPECT_EQ(gemm_invariant_plan(fp8(4096, 256), 132).splits, 2);
}

// The key ranges of a token under a fixed split size depend on its own key count only, never on the grid's split
// count; they tile [0, nkeys) in order; the combine reads exactly the splits that hold keys.
TEST(BatchInvariantAttention, FixedSplitsDoNotDependOnTheGrid) {
  const int64_t C = kAttnInvariantSplitKeys;
  ASSERT_EQ(C % detail::kAttnTile, 0);
  ASSERT_EQ(C % detail::kTcKeys, 0);
  for (int64_t nkeys = 1; nkeys <= 700; ++nkeys) {
    const int64_t need = sparse_attention_fixed_splits(nkeys, C);
    EXPECT_EQ(need, (nkeys + C - 1) / C);
    std::vector<std::pair<int64_t, int64_t>> ref;
    for (int64_t grid = need; grid <= need + 5; ++grid) {
      const int64_t used = detail::attn_token_splits(nkeys, grid, C);
      EXPECT_EQ(used, need);
      std::vector<std::pair<int64_t, int64_t>> ranges;
      int64_t covered = 0;
      for (int64_t z = 0; z < used; ++z) {
        int64_t b, e;
        detail::attn_split_range(nkeys, z, grid, C, 32, b, e);
        EXPECT_EQ(b, covered);
        EXPECT_GT(e, b);
        EXPECT_LE(e - b, C);
        covered = e;
        ranges.emplace_back(b, e);
      }
      EXPECT_EQ(covered, nkeys);
      if (ref.empty()) ref = ranges;
      EXPECT_EQ(ranges, ref) << "nkeys " << nkeys << " grid " << grid;
    }
    // A grid too small for the token (never sized so by the runner): the last split takes the rest, no key lost.
    if (need > 1) {
      int64_t b, e;
      detail::attn_split_range(nkeys, need - 2, need - 1, C, 32, b, e);
      EXPECT_EQ(e, nkeys);
    }
  }
}

// Without a fixed size the ranges are the kernels' previous ones: fp32 kernel ceil(nkeys / S) keys per split,
// tensor-core kernel rounded up to whole 32-key tiles.
TEST(BatchInvariantAttention, DefaultSplitsUnchanged) {
  for (int64_t nkeys : {1, 31, 64, 100, 640, 4097})
    for (int64_t S : {1, 2, 3, 7, 20}) {
      const int64_t per = (nkeys + S - 1) / S, per_tc = (per + 31) / 32 * 32;
      for (int64_t z = 0; z < S; ++z) {
        int64_t b, e;
        detail::attn_split_range(nkeys, z, S, 0, 1, b, e);
        const int64_t ob = z * per, oe = ob + per < nkeys ? ob + per : nkeys;
        if (ob < nkeys) {
          EXPECT_EQ(b, ob);
          EXPECT_EQ(e, oe);
        } else {
          EXPECT_LE(e, b);  // empty, as before
        }
        detail::attn_split_range(nkeys, z, S, 0, 32, b, e);
        const int64_t tb = z * per_tc < nkeys ? z * per_tc : nkeys, te = tb + per_tc < nkeys ? tb + per_tc : nkeys;
        EXPECT_EQ(b, tb);
        EXPECT_EQ(e, te);
      }
    }
  EXPECT_EQ(sparse_attention_workspace_floats(4, 8, 64, 1), 0);
  EXPECT_EQ(sparse_attention_workspace_floats(4, 8, 64, 1, true), 4 * 8 * 66);
}

// The mHC split in batch-invariant mode: the same reduction partition and finalize for every T.
TEST(BatchInvariantMhc, SplitIsFixedByTheShape) {
  for (auto [n, dim] : std::vector<std::pair<int64_t, int64_t>>{{4, 4096}, {4, 7168}, {4, 256}, {2, 64}, {8, 1024}})
    for (int64_t mixes : {(2 + n) * n, n}) {
      if (detail::hc_max_splits(dim, mixes) < 1) continue;
      const detail::HcSplit ref = detail::hc_invariant_split(1, n, dim, mixes);
      const int64_t nchunks = (n * dim + detail::kHcChunk - 1) / detail::kHcChunk;
      EXPECT_LE(ref.splits, detail::hc_max_splits(dim, mixes));
      EXPECT_GE(int64_t(ref.splits) * ref.chunks_per_split, nchunks);
      EXPECT_LT(int64_t(ref.splits - 1) * ref.chunks_per_split, nchunks);
      for (int64_t T : {1, 7, 8, 64, 65, 256, 257, 4096}) {
        const detail::HcSplit s = detail::hc_invariant_split(T, n, dim, mixes);
        EXPECT_EQ(s.splits, ref.splits);
        EXPECT_EQ(s.chunks_per_split, ref.chunks_per_split);
        EXPECT_TRUE(s.wide);
      }
    }
}

// The cpu backend claims batch invariance without the flag (README, engine.h): a request's tokens and logprobs must
// be bit-identical whether it runs alone in one prefill or batched with others whose prompts are chunked beside it
// (a 16-token budget splits every prompt but the first over several steps, and decode rows share steps with
// prefill chunks). A forward whose reductions followed the batch (a GEMM blocked over the step's tokens, a
// per-step normalisation) would change low bits here.
TEST(BatchInvariantEngine, CpuTokensAndLogprobsDoNotDependOnTheBatch) {
  struct Out {
    std::vector<int32_t> ids;
    std::vector<double> logprobs;
    bool operator==(const Out&) const = default;
  };
  auto prompt = [](int i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 5 + 9 * i; ++k) p.push_back(2 + (k * 13 + i) % 200);
    return p;
  };
  auto run = [&](const std::vector<int>& which, int64_t budget) {
    dsinfer::EngineOptions o;
    o.model_dir = dsinfer::test::own_fixture("tiny-v4-c");
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = budget;
    o.max_model_len = 96;
    std::string err;
    auto e = dsinfer::Engine::create(o, &err);
    EXPECT_TRUE(e) << err;
    std::map<int, Out> out;
    if (!e) return out;
    std::map<uint64_t, int> index;
    for (int i : which) {
      dsinfer::Request r;
      r.prompt_is_ids = true;
      r.prompt_ids = prompt(i);
      r.sampling.max_tokens = 6;
      r.sampling.temperature = 0.0;
      r.sampling.logprobs = true;
      const uint64_t id = e->submit(r, &err);
      EXPECT_NE(id, 0u) << err;
      index[id] = i;
    }
    std::vector<dsinfer::RequestResult> res;
    EXPECT_TRUE(e->run_until_idle(res, &err)) << err;
    for (const auto& r : res) {
      Out& o = out[index.at(r.id)];
      o.ids = r.completions.at(0).token_ids;
      for (const auto& lp : r.completions.at(0).logprobs) o.logprobs.push_back(lp.logprob);
    }
    return out;
  };
  const auto together = run({0, 1, 2}, 16);
  ASSERT_EQ(together.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const auto alone = run({i}, 96);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone.at(i).ids.size(), 6u);
    EXPECT_EQ(alone.at(i).logprobs.size(), 6u);
    EXPECT_TRUE(alone.at(i) == together.at(i)) << "request " << i << " differs alone and batched";
  }
}
