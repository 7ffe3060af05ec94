// Expert parallelism over 2 GPUs (docs/multi_gpu.md) against 1 GPU, through the public Engine API: the same
// greedy requests (prefill + decode, batched, device sampling with logprobs) on the fixtures tiny-v4-a / tiny-v4-b
// and the shipped model must give the same tokens, and each token's logprob and top-5 alternatives within 2e-3.
// Why a tolerance and not bit equality: the 2-GPU MoE sums each rank's local experts (rank 0 adds the shared
// expert) and the all-reduce then adds the ranks, so the fp32 additions of a token's k expert outputs are grouped
// differently than the single GPU's k-order sum: ~1e-7 relative per layer, a few 1e-6 in the logits after a few
// layers and the head; 2e-3 leaves a wide margin while a wrong expert split (a missing or doubled expert, the
// shared expert counted twice) moves logprobs by 1e-1 or more. Both runs are batch-invariant (--batch-invariant):
// otherwise the MoE of non-FP4 experts (the fp32 fixtures) picks its fp32 or bf16 kernel from T * topk against
// 8 x the experts it holds, which is E on one GPU and E/2 on each of two, so some step sizes would round
// differently on 1 and 2 GPUs (correct either way, but not comparable at 2e-3). Skips without 2 GPUs or models.
// Issue 27: the same checks with 2 and 4 ranks sharing ONE GPU through the in-process communicator (NCCL cannot
// put two ranks on a device), and the tests that need no second GPU for anything else run on one that way.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/runner/tensor_parallel_parts.h"
#include "cache/state_layout.h"
#include "check/solo_sequence.h"
#include "cuda/device_buffer.h"
#include "cuda/gpu_test_util.h"
#include "dsinfer/diagnostics.h"
#include "dsinfer/engine.h"
#include "engine/runner_factory.h"
#include "io/config.h"
#include "ops/moe/expert_remap.h"
#include "ops/moe/expert_remap_cuda.h"
#include "parallel/eplb.h"
#include "prefix_test_util.h"
#include "test_util.h"
#include "weight_gen.h"
#include "tests/build_paths.h"

namespace {

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// "auto" (NCCL) with 2 GPUs, else the in-process communicator: the ranks share GPU 0.
std::string comm_for_two_ranks() { return visible_gpus() >= 2 ? "auto" : "in-process"; }

#define SKIP_WITHOUT_GPU()                                      \
  do {                                                          \
    if (visible_gpus() < 1) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define SKIP_WITHOUT_TWO_GPUS()                                                             \
  do {                                                                                      \
    if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << visible_gpus(); \
  } while (0)

std::string find_model(const std::string& name) {
  // Relative paths first: on the GPU machine the tests run from the repository root of a copied tree.
  for (const std::string& d : {"tests/fixtures/" + name, "models/" + name, dsinfer::test::own_fixture(name),
                               std::string(DSINFER_SOURCE_DIR) + "/models/" + name})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

// configs/deepseek-v4-flash (V4-Flash shapes for dummy weights): the relative path first, as find_model.
std::string find_flash_config() {
  for (const std::string& d :
       {std::string("configs/deepseek-v4-flash"), std::string(DSINFER_SOURCE_DIR) + "/configs/deepseek-v4-flash"})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

// Every V4 fixture with the rank counts that divide its experts (tiny-v4-c has 6): the one-GPU equality tests run
// on each (session 23; CI's CPU twins in tests/unit/test_parallel_layouts_cpu.cpp cover the same list at 2-8 ranks).
struct FixtureRanks {
  const char* name;
  std::vector<int32_t> ranks;
};
const FixtureRanks kEveryV4Fixture[] = {{"tiny-v4-a", {2, 4}},        {"tiny-v4-b", {2, 4}},
                                        {"tiny-v4-c", {2, 3}},        {"tiny-v4-official", {2, 4}},
                                        {"tiny-v4-a-bf16", {2, 4}}};

struct Out {
  std::vector<int32_t> tokens;
  std::vector<dsinfer::TokenLogprob> logprobs;
};

// ranks: --gpus; eplb_interval > 0: EPLB with 2 redundant slots, rebalanced every eplb_interval steps (so several
// times per run); comm: the communicator; invariant: --batch-invariant; budget: tokens per step; dp: DP attention
// (--data-parallel-size = ranks); tp: TP attention (--tensor-parallel-size = ranks).
struct RunSetup {
  int32_t ranks = 1;
  bool dp = false;
  bool tp = false;
  int64_t eplb_interval = 0;
  std::string comm = "auto";
  bool invariant = true;
  int64_t budget = 64;  // chunked prefill mixed with decode
  bool async = true;     // EngineOptions::async_scheduling
  std::string* mode = nullptr;  // where to put the engine's step mode
};

std::vector<Out> run(const std::string& model, const RunSetup& s) {
  dsinfer::EngineOptions o;
  o.eplb = s.eplb_interval > 0;
  o.num_redundant_experts = o.eplb ? 2 : 0;
  o.eplb_interval = o.eplb ? s.eplb_interval : 1000;
  o.model_dir = model;
  o.backend = "cuda";
  o.numerics = "hf";
  o.gpus = s.ranks;
  o.data_parallel_size = s.dp ? s.ranks : 1;
  o.tensor_parallel_size = s.tp ? s.ranks : 1;
  o.communicator = s.comm;
  o.batch_invariant = s.invariant;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = s.budget;
  o.max_model_len = 512;
  o.async_scheduling = s.async ? "on" : "off";
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  if (!e) return {};
  if (s.mode) *s.mode = e->step_mode();
  std::map<uint64_t, size_t> idx;
  const int n = 6;
  for (int i = 0; i < n; ++i) {
    dsinfer::Request r;
    r.prompt_is_ids = true;
    for (int k = 0; k < 5 + 37 * i; ++k) r.prompt_ids.push_back(8 + (i * 131 + k * 29) % 200);
    r.sampling.temperature = 0.0;
    r.sampling.max_tokens = 16;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 5;
    const uint64_t id = e->submit(r, &err);
    EXPECT_NE(id, 0u) << err;
    idx[id] = size_t(i);
  }
  std::vector<dsinfer::RequestResult> results;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  std::vector<Out> out(static_cast<size_t>(n));
  for (const auto& r : results) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    if (r.completions.size() == 1 && idx.count(r.id)) out[idx[r.id]] = {r.completions[0].token_ids, r.completions[0].logprobs};
  }
  return out;
}

// Raw logprob of `token` at output position j (the emitted token's or one of its top-5 alternatives'; -inf when
// neither).
double logprob_at(const Out& o, size_t j, int32_t token) {
  const dsinfer::TokenLogprob& lp = o.logprobs[j];
  if (lp.token == token) return lp.logprob;
  for (const auto& [t, l] : lp.top)
    if (t == token) return l;
  return -INFINITY;
}

// Two runs' outputs: same tokens, every logprob (top-5 included) within tolerance.
// pair_margin > 0 (fast-path runs whose only difference is the grouping of fp32 sums): a request may diverge at a
// near-tie, i.e. at its first differing token j run one's token a and run two's b are each its own run's best
// (own margins lp1(a) - lp1(b) and lp2(b) - lp2(a) >= 0) and their sum (the change of one logit difference between
// the runs) is below pair_margin; positions before j are compared as above, the rest of that request is not. Every
// divergence is printed with both runs' margins, whichever rule applies.
void compare_outputs(const std::string& name, const std::vector<Out>& one, const std::vector<Out>& two,
                     const std::string& label, double tolerance, double pair_margin = 0) {
  SCOPED_TRACE(name + ": " + label);
  ASSERT_EQ(one.size(), two.size());
  double max_diff = 0;
  int diverged = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    size_t j = 0;
    while (j < one[i].tokens.size() && j < two[i].tokens.size() && one[i].tokens[j] == two[i].tokens[j]) ++j;
    const bool same = j == one[i].tokens.size() && j == two[i].tokens.size();
    if (!same) {
      ++diverged;
      const bool both = j < one[i].tokens.size() && j < two[i].tokens.size() && j < one[i].logprobs.size() &&
                        j < two[i].logprobs.size();
      double own1 = -INFINITY, own2 = -INFINITY;
      if (both) {
        const int32_t a = one[i].tokens[j], b = two[i].tokens[j];
        own1 = logprob_at(one[i], j, a) - logprob_at(one[i], j, b);
        own2 = logprob_at(two[i], j, b) - logprob_at(two[i], j, a);
      }
      std::printf("%s: %s: request %zu diverges at token %zu (%d vs %d): own margins %.4g + %.4g = %.4g (bound %.3g)\n",
                  name.c_str(), label.c_str(), i, j, j < one[i].tokens.size() ? one[i].tokens[j] : -1,
                  j < two[i].tokens.size() ? two[i].tokens[j] : -1, own1, own2, own1 + own2, pair_margin);
      if (pair_margin <= 0) {
        ADD_FAILURE() << "request " << i << " differs at token " << j;
      } else {
        EXPECT_TRUE(both) << "request " << i << ": one output ends at token " << j;
        EXPECT_GE(own1, -1e-6) << "request " << i << " token " << j << ": run one emitted a token below the other's";
        EXPECT_GE(own2, -1e-6) << "request " << i << " token " << j << ": run two emitted a token below the other's";
        EXPECT_LT(own1 + own2, pair_margin) << "request " << i << " token " << j << ": not a near-tie";
      }
    }
    ASSERT_GE(one[i].logprobs.size(), std::min(j, one[i].tokens.size()));
    ASSERT_GE(two[i].logprobs.size(), std::min(j, two[i].tokens.size()));
    const size_t upto = same ? std::min(one[i].logprobs.size(), two[i].logprobs.size()) : j;
    if (same) ASSERT_EQ(one[i].logprobs.size(), two[i].logprobs.size());
    for (size_t t = 0; t < upto; ++t) {
      const auto &a = one[i].logprobs[t], &b = two[i].logprobs[t];
      max_diff = std::max(max_diff, std::abs(a.logprob - b.logprob));
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t q = 0; q < a.top.size(); ++q) max_diff = std::max(max_diff, std::abs(a.top[q].second - b.top[q].second));
    }
  }
  std::printf("%s: %s: %s, max logprob difference %.3g\n", name.c_str(), label.c_str(),
              diverged ? (std::to_string(diverged) + " request(s) diverge at a near-tie").c_str() : "tokens identical",
              max_diff);
  EXPECT_LE(max_diff, tolerance);
}

// How two runs with the same tokens differ, for the record (bench/NOTES.md): positions whose chosen-token logprob or
// alternatives differ at all, the quantiles of |chosen-token logprob difference| over every position, and where the
// largest is (request, step).
void print_difference_profile(const std::string& name, const std::vector<Out>& one, const std::vector<Out>& two,
                              const std::string& label) {
  std::vector<double> d;
  int64_t differing = 0, at_req = -1, at_step = -1;
  double worst = -1;
  for (size_t i = 0; i < std::min(one.size(), two.size()); ++i)
    for (size_t t = 0; t < std::min(one[i].logprobs.size(), two[i].logprobs.size()); ++t) {
      const auto &a = one[i].logprobs[t], &b = two[i].logprobs[t];
      const double x = std::abs(a.logprob - b.logprob);
      d.push_back(x);
      if (a.logprob != b.logprob || a.top != b.top) ++differing;
      if (x > worst) {
        worst = x;
        at_req = int64_t(i);
        at_step = int64_t(t);
      }
    }
  if (d.empty()) return;
  std::sort(d.begin(), d.end());
  auto q = [&](double f) { return d[std::min(d.size() - 1, size_t(f * double(d.size())))]; };
  std::printf("%s: %s: %zu positions, %lld differ; |d logprob| p50 %.3g p90 %.3g p99 %.3g max %.3g (request %lld step "
              "%lld)\n",
              name.c_str(), label.c_str(), d.size(), (long long)differing, q(0.5), q(0.9), q(0.99), d.back(),
              (long long)at_req, (long long)at_step);
}

// Setups a and b on one model: same tokens, logprobs within 2e-3. EPLB off vs on: each assignment is still
// computed once, by a replica with the same weights, so only the all-reduce's grouping of the fp32 sums changes:
// the same tolerance as 1 vs 2 GPUs.
void compare(const std::string& name, const RunSetup& a, const RunSetup& b, const std::string& label,
             double tolerance = 2e-3, double pair_margin = 0) {
  const std::string model = find_model(name);
  if (model.empty()) GTEST_SKIP() << name << " not found";
  compare_outputs(name, run(model, a), run(model, b), label, tolerance, pair_margin);
}

// check-reference (its default: the exact fp32 path) with n ranks sharing one GPU (in-process communicator), EP, DP
// or TP attention: every prompt within the check's tolerance, every greedy token equal, the runner the parallel one
// (n > 1). Skips a model that is not there.
// gate: the check's reference, numerics and tolerance where the model's default ones do not apply (empty: the
// fixture's reference.safetensors at the runner's default tolerance); tp: TP attention (not with dp).
struct Gate {
  std::string reference;  // file name inside the model directory
  std::string numerics;
  double tolerance = -1;
  bool tp = false;
};
void check_reference_on_one_gpu(const char* name, int32_t n, bool dp, const Gate& gate = {}) {
  const std::string model = find_model(name);
  if (model.empty()) return;
  const std::string what = std::string(name) + " at " + std::to_string(n) +
                           (dp ? " DP ranks" : gate.tp ? " TP ranks" : " ranks") +
                           (gate.numerics.empty() ? "" : " (" + gate.numerics + ")");
  dsinfer::CheckReferenceOptions o;
  o.model_dir = model;
  o.backend = "cuda";
  o.gpus = n;
  o.data_parallel_size = dp ? n : 1;
  o.tensor_parallel_size = gate.tp ? n : 1;
  o.communicator = "in-process";
  if (!gate.reference.empty()) o.reference_path = model + "/" + gate.reference;
  o.numerics = gate.numerics;
  o.tolerance = gate.tolerance;
  dsinfer::CheckReferenceReport rep;
  std::string err;
  ASSERT_TRUE(dsinfer::check_reference(o, &rep, &err)) << what << ": " << err;
  double worst = 0;
  for (const auto& p : rep.prompts) worst = std::max(worst, p.rel_err);
  std::printf("%s on one GPU, exact path: max rel err %.3g, greedy %lld/%lld\n", what.c_str(), worst,
              static_cast<long long>(rep.greedy_matched), static_cast<long long>(rep.greedy_total));
  EXPECT_TRUE(rep.ok) << what;
  EXPECT_EQ(rep.greedy_matched, rep.greedy_total) << what;
  if (n > 1) {
    EXPECT_NE(rep.runner_name.find("parallel (" + std::to_string(n) + " ranks on 1 GPUs"), std::string::npos)
        << rep.runner_name;
    EXPECT_EQ(rep.runner_name.find("DP attention + expert parallel") != std::string::npos, dp) << rep.runner_name;
    EXPECT_EQ(rep.runner_name.find("TP attention + expert parallel") != std::string::npos, gate.tp) << rep.runner_name;
  }
}

}  // namespace

TEST(GpuMultiGpu, TinyV4aMatchesOneGpu) {
  SKIP_WITHOUT_TWO_GPUS();
  compare("tiny-v4-a", {}, {.ranks = 2}, "1 GPU vs 2 GPUs");
}

TEST(GpuMultiGpu, TinyV4bMatchesOneGpu) {
  SKIP_WITHOUT_TWO_GPUS();
  compare("tiny-v4-b", {}, {.ranks = 2}, "1 GPU vs 2 GPUs");
}

// The shipped model's FP4 experts run the bf16 fast kernels, where expert parallelism's all-reduce regroups each
// token's sum of partial sums and flips bf16 roundings downstream: measured with 2 ranks on one GPU, 2.9e-2 and
// one greedy token different (bench/NOTES.md 2026-12-02), so EP cannot meet 2e-3 here by construction. DP attention
// + EP combines each token's expert outputs on its own rank in top-k order with the one-rank kernel
// (expert_exchange_cuda.cpp): with --batch-invariant its tokens and logprobs are the one-rank bits. Two GPUs
// (NCCL), or two ranks sharing one (in-process).
TEST(GpuMultiGpu, ShippedModelMatchesOneGpu) {
  SKIP_WITHOUT_GPU();
  compare("dsv4-small", {}, {.ranks = 2, .dp = true, .comm = comm_for_two_ranks()}, "1 rank vs 2 ranks, DP attention",
          0.0);
}

// Issue 27: DP attention + EP with 2 to 4 ranks sharing one GPU (in-process communicator; every V4 fixture and the
// shipped model) against one rank under --batch-invariant: tokens and every logprob (top-5 included) bit-identical.
// Each rank runs attention for its own
// sequences only (the engine spreads them), its routed pairs go to the experts' ranks and come back; nothing is
// summed across ranks, so there is no tolerance: a wrong pair, expert or order moves logprobs by 1e-1 or more.
TEST(GpuMultiGpu, DpRanksSharingOneGpuMatchOneRankBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const FixtureRanks& f : kEveryV4Fixture)
    for (int32_t n : f.ranks)
      compare(f.name, {}, {.ranks = n, .dp = true, .comm = "in-process"}, std::to_string(n) + " DP ranks on one GPU",
              0.0);
  compare("dsv4-small", {}, {.ranks = 4, .dp = true, .comm = "in-process"}, "4 DP ranks on one GPU", 0.0);
  // Session 19: the above take the fixed-capacity exchange (the default for ranks sharing one GPU); the exchange of
  // counts through the host gives one rank's bits too.
  setenv("DSINFER_DP_EXCHANGE", "counts", 1);
  compare("tiny-v4-a", {}, {.ranks = 2, .dp = true, .comm = "in-process"}, "2 DP ranks, exchange of counts", 0.0);
  unsetenv("DSINFER_DP_EXCHANGE");
}

// Issue 27: EP and TP attention with 2 and 4 ranks sharing one GPU against one rank under --batch-invariant, bit for
// bit. EP: each pair's expert output is computed by one rank into a [T, k, D] buffer zero in the other ranks' slots
// and all-reduced (x + 0 = x), then every rank runs the one-rank combine (expert_slots_cuda.cpp); TP: each rank the
// query heads of its wo_a output groups, the groups' outputs gathered the same way, wo_b whole on every rank
// (tensor_parallel_cuda.cpp), each rank's wq_b rows and wo_a groups on the whole weights' GEMM kernels
// (tp::rows_part / tp::groups_part; TpRankPartsRunTheWholeWeightsKernels). Nothing is summed across ranks but zeros,
// so there is no tolerance. tiny-v4-b has 3 output groups (2 ranks: 1 and 2 groups); at 4 ranks the 2-group models
// leave two ranks without heads. Session 13 measured TP off here (a one-group wo_a call on another kernel); session 14:
// 0 at 2 and 4 ranks on all three models.
TEST(GpuMultiGpu, EpAndTpRanksSharingOneGpuMatchOneRankBitForBit) {
  SKIP_WITHOUT_GPU();
  std::vector<FixtureRanks> models(std::begin(kEveryV4Fixture), std::end(kEveryV4Fixture));
  models.push_back({"dsv4-small", {2, 4}});
  for (const auto& [name, ranks] : models) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    const std::vector<Out> one = run(model, {});
    for (int32_t n : ranks) {
      compare_outputs(name, one, run(model, {.ranks = n, .comm = "in-process"}),
                      std::to_string(n) + " EP ranks on one GPU", 0.0);
      const std::vector<Out> tp = run(model, {.ranks = n, .tp = true, .comm = "in-process"});
      print_difference_profile(name, one, tp, std::to_string(n) + " TP ranks on one GPU");
      compare_outputs(name, one, tp, std::to_string(n) + " TP ranks on one GPU", 0.0);
    }
  }
}

// Issue 27, session 17: asynchronous steps at N > 1 (docs/multi_gpu.md "Asynchronous steps at N > 1"). EP and TP
// ranks sharing one GPU take the engine's asynchronous path (step t+1 planned and launched while step t's results
// are read; the shards > 0 take their pending input tokens from shard 0's sampled ids on the device): the same
// tokens and logprobs, bit for bit, as synchronous steps of the same ranks, in fast mode (no --batch-invariant: the
// same kernels on the same shapes either way), eager and with the group's decode graphs (DSINFER_GROUP_GRAPHS=1).
// Session 19: DP attention too (each rank samples its own sequences' rows on the device and fills their next tokens
// from its own ids), eager and with the group's graphs (its exchange at a fixed capacity, on the device).
TEST(GpuMultiGpu, AsyncStepsOfRanksSharingOneGpuEqualSyncSteps) {
  SKIP_WITHOUT_GPU();
  if (visible_gpus() != 1) GTEST_SKIP() << "the ranks share GPU 0 only with one visible GPU";
  enum class L { kEp, kTp, kDp };
  for (const char* name : {"tiny-v4-a", "dsv4-small"}) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    for (int32_t n : {2, 4})
      for (const L layout : {L::kEp, L::kTp, L::kDp}) {
        const bool tp = layout == L::kTp, dp = layout == L::kDp;
        const std::string label =
            std::to_string(n) + (tp ? " TP" : dp ? " DP" : " EP") + " ranks on one GPU";
        std::string async_mode, sync_mode, graph_mode;
        const RunSetup a{.ranks = n, .dp = dp, .tp = tp, .comm = "in-process", .invariant = false, .mode = &async_mode};
        RunSetup sy = a;
        sy.async = false;
        sy.mode = &sync_mode;
        const std::vector<Out> async = run(model, a), sync = run(model, sy);
        EXPECT_EQ(async_mode, "async") << name << ": " << label;
        EXPECT_EQ(sync_mode, "sync (async scheduling off)") << name << ": " << label;
        compare_outputs(name, sync, async, label + ": async vs sync", 0.0);
        RunSetup g = a;
        g.mode = &graph_mode;
        setenv("DSINFER_GROUP_GRAPHS", "1", 1);
        const std::vector<Out> graphs = run(model, g);
        unsetenv("DSINFER_GROUP_GRAPHS");
        EXPECT_EQ(graph_mode, "async") << name << ": " << label;
        compare_outputs(name, sync, graphs, label + ": async with group graphs vs sync eager", 0.0);
      }
  }
}

// Issue 27, session 17: FP8 dispatch (DSINFER_DP_DISPATCH=fp8, fast mode; docs/multi_gpu.md "FP8 dispatch"). The
// experts then read dequantized e4m3 inputs (a scale per 128 values), which one rank never does, so DP ranks with it
// are compared with DP ranks on the bf16 wire and with one rank as a measurement (printed for bench/NOTES.md), not
// against a tolerance (no distribution measured yet). Asserted: both runs complete with every request, and the FP8
// run differs somewhere from the bf16 one (the path was taken; the rounding reaches the logprobs).
TEST(GpuMultiGpu, DpFp8DispatchAgainstBf16) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "dsv4-small"}) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    const RunSetup dp{.ranks = 2, .dp = true, .comm = comm_for_two_ranks(), .invariant = false};
    const std::vector<Out> one = run(model, {.invariant = false}), bf16 = run(model, dp);
    setenv("DSINFER_DP_DISPATCH", "fp8", 1);
    const std::vector<Out> fp8 = run(model, dp);
    unsetenv("DSINFER_DP_DISPATCH");
    ASSERT_EQ(fp8.size(), bf16.size());
    bool differs = false;
    int64_t same_tokens = 0, same_one = 0;
    for (size_t i = 0; i < fp8.size(); ++i) {
      EXPECT_FALSE(fp8[i].tokens.empty()) << name << ": request " << i;
      same_tokens += fp8[i].tokens == bf16[i].tokens ? 1 : 0;
      same_one += fp8[i].tokens == one[i].tokens ? 1 : 0;
      for (size_t t = 0; t < std::min(fp8[i].logprobs.size(), bf16[i].logprobs.size()); ++t)
        differs = differs || fp8[i].logprobs[t].logprob != bf16[i].logprobs[t].logprob;
      differs = differs || fp8[i].tokens != bf16[i].tokens;
    }
    EXPECT_TRUE(differs) << name << ": the FP8 dispatch changed nothing: was it taken?";
    std::printf("%s: 2 DP ranks, FP8 dispatch: %lld/%zu requests with the bf16 wire's greedy tokens, %lld/%zu with one "
                "rank's\n", name, (long long)same_tokens, fp8.size(), (long long)same_one, fp8.size());
    print_difference_profile(name, bf16, fp8, "2 DP ranks: FP8 vs bf16 dispatch");
    print_difference_profile(name, one, bf16, "one rank vs 2 DP ranks, bf16 dispatch (fast mode)");
    print_difference_profile(name, one, fp8, "one rank vs 2 DP ranks, FP8 dispatch");
  }
}

// TP on the exact fp32 path against the fixtures' reference logits (check-reference), 2 and 4 ranks on one GPU.
TEST(GpuMultiGpu, TpRanksSharingOneGpuPassCheckReference) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "dsv4-small"})
    for (int32_t n : {2, 4}) check_reference_on_one_gpu(name, n, false, {.tp = true});
}

// TP outside --batch-invariant (fast kernels), 2 ranks on one GPU. TP's own share is exact there too: bit-identical
// to EP at the same rank count (measured 0 on both fixtures, bench/NOTES.md session 14), since its MoE is EP's and its
// wq_b / wo_a parts run the whole weights' kernels. Against one rank: the same greedy tokens, logprobs within 2e-2.
// That difference is EP's fast path, the same bits with and without TP: the fp32 fixtures' expert GEMMs take the fp32
// or the bf16 kernel from T * k against 8 x the experts a rank holds (ops/moe/moe_plan.h; 8 on one rank, 4 on each of
// two), so mid-sized steps round in bf16 on one side only. Measured (docs/decisions.md 2026-12-03 "TP fast-path
// bound"): 84 / 88 of 96 positions differ, chosen-token |d| p50 5e-7 / 2e-6, p90 9e-5 / 2.6e-4, max 5.7e-4 / 1.0e-3,
// 8.5e-4 / 4.55e-3 with the top-5 alternatives (tiny-v4-a / -b): a spread of bf16 roundings, not a tie. 2e-2 leaves
// a 4.4x margin over the worst; a wrong head, group or expert split moves logprobs by 1e-1 or more.
TEST(GpuMultiGpu, TpRanksSharingOneGpuFastPathMatchesOneRank) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "tiny-v4-b"}) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    const std::vector<Out> one = run(model, {.invariant = false});
    const std::vector<Out> ep = run(model, {.ranks = 2, .comm = "in-process", .invariant = false});
    const std::vector<Out> tp = run(model, {.ranks = 2, .tp = true, .comm = "in-process", .invariant = false});
    print_difference_profile(name, one, ep, "1 rank vs 2 EP ranks, fast path");
    print_difference_profile(name, one, tp, "1 rank vs 2 TP ranks, fast path");
    print_difference_profile(name, ep, tp, "2 EP vs 2 TP ranks, fast path");
    compare_outputs(name, ep, tp, "2 EP vs 2 TP ranks on one GPU, fast path", 0.0);
    compare_outputs(name, one, tp, "2 TP ranks on one GPU, fast path", 2e-2);
  }
}

// Issue 27, session 14: the op behind TP's difference under --batch-invariant, measured op by op. Each rank's part of
// wo_a (its output groups) and of wq_b (its heads' rows), called as the runner calls it (tp::groups_part /
// tp::rows_part), must give the bits of the same columns of the whole weight's call, at the fixtures', the shipped
// model's and V4-Flash's shapes, at 2, 4 and 8 ranks and 1 to 300 rows. The naive call of the part (a plain view:
// one wo_a group as a one-group call, wq_b's rows as a smaller weight) is measured beside it for the record: a
// one-group call takes the skinny or streaming kernel where the grouped whole takes the tiled one.
TEST(GpuMultiGpu, TpRankPartsRunTheWholeWeightsKernels) {
  SKIP_WITHOUT_GPU();
  using dsinfer::ops::cuda::GemmPrecision;
  using dsinfer::ops::cuda::WeightFormat;
  namespace tp = dsinfer::backends::tp;
  constexpr GemmPrecision kInv = GemmPrecision::kBatchInvariant;
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  // wo_a: `groups` groups of `rows` rows over `cols` inputs each; wq_b: H * hd rows (`rows` per output group's
  // heads) over q_lora_rank inputs.
  struct Case {
    const char* what;
    WeightFormat fmt;
    int64_t groups, rows, cols;
    bool grouped;
  };
  const Case cases[] = {{"tiny-v4-a wo_a", WeightFormat::F32, 2, 32, 128, true},
                        {"tiny-v4-b wo_a", WeightFormat::F32, 3, 32, 96, true},
                        {"dsv4-small wo_a", WeightFormat::FP8_BLOCK, 2, 128, 128, true},
                        {"V4-Flash wo_a", WeightFormat::FP8_BLOCK, 8, 1024, 4096, true},
                        {"tiny-v4-a wq_b", WeightFormat::F32, 2, 128, 32, false},
                        {"tiny-v4-b wq_b", WeightFormat::F32, 3, 96, 32, false},
                        {"dsv4-small wq_b", WeightFormat::FP8_BLOCK, 2, 128, 128, false},
                        {"V4-Flash wq_b", WeightFormat::FP8_BLOCK, 8, 4096, 1536, false}};
  constexpr int64_t kMaxM = 300;
  uint64_t seed = 2027;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t N = c.groups * c.rows, xw = c.grouped ? c.groups * c.cols : c.cols;
    const dsinfer::test::HostWeight hw =
        dsinfer::test::make_host_weight(c.fmt, N, c.cols, ++seed, true, 128, 128, false);
    auto dw = dsinfer::test::upload(hw);
    const std::vector<float> x = dsinfer::test::random_floats(size_t(kMaxM * xw), ++seed);
    auto dx = dsinfer::cuda::test::to_device(x);
    dsinfer::cuda::DeviceBuffer<float> dwhole, dpart, dplain, dxp;
    ASSERT_TRUE(dwhole.alloc(size_t(kMaxM * N), "y").is_ok());
    ASSERT_TRUE(dpart.alloc(size_t(kMaxM * N), "y").is_ok());
    ASSERT_TRUE(dplain.alloc(size_t(kMaxM * N), "y").is_ok());
    ASSERT_TRUE(dxp.alloc(size_t(kMaxM * xw), "x").is_ok());
    for (int32_t n : {2, 4, 8}) {
      double plain_diff = 0;
      int64_t halved = 0;
      for (int64_t M : {1, 7, 40, 300}) {
        ASSERT_TRUE((c.grouped ? dsinfer::ops::cuda::gemm_grouped_cuda(dx.data(), M, xw, c.cols, dw.w, c.groups,
                                                                      dwhole.data(), N, c.rows, nullptr, kInv)
                               : dsinfer::ops::cuda::gemm_cuda(dx.data(), M, xw, dw.w, dwhole.data(), N, false,
                                                               nullptr, kInv))
                        .is_ok());
        for (int32_t rank = 0; rank < n; ++rank) {
          const int64_t g0 = int64_t(rank) * c.groups / n, g1 = int64_t(rank + 1) * c.groups / n, ng = g1 - g0;
          if (ng == 0) continue;  // a rank without heads (more ranks than groups)
          const int64_t r0 = g0 * c.rows, nr = ng * c.rows;
          ASSERT_EQ(cudaMemset(dpart.data(), 0, size_t(kMaxM * N) * 4), cudaSuccess);
          ASSERT_EQ(cudaMemset(dplain.data(), 0, size_t(kMaxM * N) * 4), cudaSuccess);
          auto view = tp::weight_rows(dw.w, r0, r0 + nr);
          ASSERT_TRUE(view.is_ok()) << view.status().message();
          if (c.grouped) {
            // The rank's attention output holds only its groups' heads: a compact [M, ng * cols] input.
            const int64_t pw = ng * c.cols;
            ASSERT_EQ(cudaMemcpy2D(dxp.data(), size_t(pw) * 4, dx.data() + g0 * c.cols, size_t(xw) * 4,
                                   size_t(pw) * 4, size_t(M), cudaMemcpyDeviceToDevice),
                      cudaSuccess);
            auto p = tp::groups_part(dw.w, c.groups, g0, g1, c.cols);
            ASSERT_TRUE(p.is_ok()) << p.status().message();
            halved += p->groups != ng;
            ASSERT_TRUE(dsinfer::ops::cuda::gemm_grouped_cuda(dxp.data(), M, pw, p->x_stride, p->w, p->groups,
                                                             dpart.data() + r0, N, p->y_stride, nullptr, kInv)
                            .is_ok());
            ASSERT_TRUE(dsinfer::ops::cuda::gemm_grouped_cuda(dxp.data(), M, pw, c.cols, *view, ng,
                                                             dplain.data() + r0, N, c.rows, nullptr, kInv)
                            .is_ok());
          } else {
            auto p = tp::rows_part(dw.w, r0, r0 + nr, true, sms);
            ASSERT_TRUE(p.is_ok()) << p.status().message();
            halved += p->groups != 1;
            ASSERT_TRUE((p->groups == 1 ? dsinfer::ops::cuda::gemm_cuda(dx.data(), M, xw, p->w, dpart.data() + r0, N,
                                                                        false, nullptr, kInv)
                                        : dsinfer::ops::cuda::gemm_grouped_cuda(dx.data(), M, xw, p->x_stride, p->w,
                                                                                p->groups, dpart.data() + r0, N,
                                                                                p->y_stride, nullptr, kInv))
                            .is_ok());
            ASSERT_TRUE(dsinfer::ops::cuda::gemm_cuda(dx.data(), M, xw, *view, dplain.data() + r0, N, false, nullptr,
                                                      kInv)
                            .is_ok());
          }
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const auto whole = dsinfer::cuda::test::to_host(dwhole, size_t(M * N));
          const auto part = dsinfer::cuda::test::to_host(dpart, size_t(M * N));
          const auto plain = dsinfer::cuda::test::to_host(dplain, size_t(M * N));
          for (int64_t m = 0; m < M; ++m) {
            const size_t o = size_t(m * N + r0);
            ASSERT_EQ(std::memcmp(part.data() + o, whole.data() + o, size_t(nr) * 4), 0)
                << n << " ranks, rank " << rank << ", M " << M << ", row " << m;
            for (int64_t j = 0; j < nr; ++j)
              plain_diff = std::max(plain_diff, double(std::abs(plain[o + j] - whole[o + j])));
          }
        }
      }
      std::printf("%s, %d ranks: the runner's parts bit-identical to the whole call (%lld of the rank calls halved); "
                  "the plain views' max difference %.3g\n",
                  c.what, n, (long long)halved, plain_diff);
    }
  }
}

// DP attention on the exact fp32 path, through check-reference: each prompt on one rank (its attention and state),
// its routed pairs computed by the experts' ranks; every prompt within the check's tolerance and every greedy token
// equal, at 2 and 4 ranks sharing one GPU.
TEST(GpuMultiGpu, DpRanksSharingOneGpuPassCheckReference) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "dsv4-small"})
    for (int32_t n : {2, 4}) check_reference_on_one_gpu(name, n, true);
}

// The same for DeepSeek-V4.1, whose forward's MoE goes through the same exchange (CudaForwardV41::moe_layer), at 2
// DP ranks, under the V4.1 fixtures' own gates (docs/decisions.md 2026-11-30 "V4.1 check-reference gates", as
// tools/gpu_checks/v41cuda.sh runs them on one GPU). Its first run (session 12) reported max rel err 8e-4 and
// greedy 128/128 but not ok: reference.safetensors was made with `hf` numerics (QAT quantizers on), for which the
// default tolerance of an fp32 checkpoint on the exact path (1e-4) does not hold on ONE rank either (one GPU:
// 8.0e-4, bench/NOTES.md session 12); the V4.1 gate there is 0.2 with every greedy step equal, because a 1-ulp
// difference can flip one fake-quantized value. The continuous check is hf-noqat against reference_noqat at 1e-5
// (one GPU: 1.59e-6): that one is what shows the DP exchange computes the right experts.
TEST(GpuMultiGpu, DpRanksSharingOneGpuPassCheckReferenceV41) {
  SKIP_WITHOUT_GPU();
  check_reference_on_one_gpu("tiny-v41-a", 2, true, {"reference_noqat.safetensors", "hf-noqat", 1e-5});
  check_reference_on_one_gpu("tiny-v41-a", 2, true, {"reference.safetensors", "hf", 0.2});
}

// Session 22: TP attention for DeepSeek-V4.1 on the CUDA runner (attention_v41_cuda.cpp: each rank the query heads
// of its wo_a output groups, their rows of wq_b, their sinks, the groups' outputs gathered exactly, wo_b whole), 2
// and 4 ranks sharing one GPU, under the fixtures' V4.1 gates (as DpRanksSharingOneGpuPassCheckReferenceV41).
// tiny-v41-b has 3 output groups: 2 ranks hold 1 and 2 groups (one group runs as two halves, tp::groups_part), 4
// ranks leave one without heads.
TEST(GpuMultiGpu, TpRanksSharingOneGpuPassCheckReferenceV41) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v41-a", "tiny-v41-b"})
    for (int32_t n : {2, 4}) {
      check_reference_on_one_gpu(name, n, false, {"reference_noqat.safetensors", "hf-noqat", 1e-5, true});
      check_reference_on_one_gpu(name, n, false, {"reference.safetensors", "hf", 0.2, true});
    }
}

// `dsinfer bench` with several ranks reports the collectives' bytes per step, and they are what the layouts send:
// EP, every rank all-reduces T x D fp32 per layer; DP, ranks sharing one GPU exchange at a fixed capacity (session
// 19, expert_exchange_cuda.cpp): rank p sends each of the N ranks a segment of T_p x k pairs (the expert id, 4 bytes,
// and the input row; its pairs for that rank, then padding) and gets as many output rows back, so over the ranks
// N x T x k pairs out and back per layer and no counts (the exchange of counts sends N x 8 bytes a rank and exactly
// the T x k pairs: DSINFER_DP_EXCHANGE=counts). The fixture's fp32 experts take fp32 inputs, and outside
// --batch-invariant the outputs come back in bf16.
TEST(GpuMultiGpu, BenchReportsCollectiveBytes) {
  SKIP_WITHOUT_GPU();
  const std::string model = find_model("tiny-v4-a");
  if (model.empty()) GTEST_SKIP() << "tiny-v4-a not found";
  auto cfg = dsinfer::io::load_model_config(model);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  const int64_t D = cfg->hidden_size, k = cfg->num_experts_per_tok, L = cfg->num_hidden_layers, B = 4;
  // What every case shares: 2 ranks sharing the GPU in-process, B sequences decoding at context 16, no prefill.
  auto options = [&]() {
    dsinfer::BenchOptions o;
    o.model_dir = model;
    o.load_format = "auto";
    o.numerics = "hf";
    o.gpus = 2;
    o.communicator = "in-process";
    o.batches = {B};
    o.context = 16;
    o.prefill = 0;
    o.iters = 2;
    o.ceilings = "nominal";
    return o;
  };
  // The bench's one case of `o` (a fatal failure here ends the test: the callers check HasFatalFailure).
  auto run_one = [](const dsinfer::BenchOptions& o, dsinfer::BenchCase& c) {
    dsinfer::BenchReport rep;
    std::string err;
    ASSERT_TRUE(dsinfer::run_bench(o, &rep, &err)) << err;
    ASSERT_EQ(rep.cases.size(), 1u);
    c = rep.cases[0];
    ASSERT_TRUE(c.error.empty()) << c.error;
  };
  for (const bool dp : {false, true}) {
    SCOPED_TRACE(dp ? "DP" : "EP");
    dsinfer::BenchOptions o = options();
    o.data_parallel_size = dp ? 2 : 1;
    dsinfer::BenchCase c;
    run_one(o, c);
    if (HasFatalFailure()) return;
    const double want = dp ? double(L * 2 * (B * k * (4 + 4 * D) + B * k * 2 * D)) : double(L * 2 * B * D * 4);
    std::printf("bench, 2 ranks %s: %.0f bytes / %.0f collectives per step, %.4f ms in rank 0's collectives\n",
                dp ? "DP attention" : "EP", c.comm_bytes_per_step, c.comm_calls_per_step, c.comm_ms);
    EXPECT_EQ(c.comm_bytes_per_step, want) << (dp ? "DP" : "EP");
    EXPECT_EQ(c.comm_calls_per_step, double(L * 2 * (dp ? 3 : 1)));
    EXPECT_GT(c.comm_ms, 0.0);
  }
  // DP, a prefill step of T = 600 tokens (one sequence, so on one rank): 2 ranks x 600 passes
  // kDpFixedExchangeMaxRows (1,024), so the step takes the exchange of counts instead of the fixed capacity (whose
  // buffers grow as N^2 x T x k): per layer each rank sends N x 8 bytes of counts, and over the ranks exactly the
  // T x k pairs go out (expert id + fp32 row) and come back (bf16 rows), in 4 collectives a rank.
  {
    SCOPED_TRACE("DP prefill");
    const int64_t T = 600;
    dsinfer::BenchOptions o = options();
    o.data_parallel_size = 2;
    o.batches = {};
    o.prefill = T;
    dsinfer::BenchCase c;
    run_one(o, c);
    if (HasFatalFailure()) return;
    const double want = double(L * (2 * 2 * 8 + T * k * (4 + 4 * D) + T * k * 2 * D));
    std::printf("bench, 2 ranks DP attention, prefill %lld: %.0f bytes / %.0f collectives per step\n", (long long)T,
                c.comm_bytes_per_step, c.comm_calls_per_step);
    EXPECT_EQ(c.comm_bytes_per_step, want);
    EXPECT_EQ(c.comm_calls_per_step, double(L * 2 * 4));
  }
  // TP: per layer every rank all-reduces wo_a's output [B, G * r] (its groups' columns, zero elsewhere) and the
  // MoE partial sums [B, D], fp32; with --batch-invariant the MoE instead gathers every pair's output [B, k, D].
  const int64_t Gr = cfg->o_groups * cfg->o_lora_rank;
  for (const bool inv : {false, true}) {
    SCOPED_TRACE(inv ? "TP, batch-invariant" : "TP");
    dsinfer::BenchOptions o = options();
    o.tensor_parallel_size = 2;
    o.batch_invariant = inv;
    dsinfer::BenchCase c;
    run_one(o, c);
    if (HasFatalFailure()) return;
    const double want = double(L * 2 * B * 4 * (Gr + (inv ? k : 1) * D));
    std::printf("bench, 2 TP ranks%s: %.0f bytes / %.0f collectives per step, %.4f ms in rank 0's collectives\n",
                inv ? " (batch-invariant)" : "", c.comm_bytes_per_step, c.comm_calls_per_step, c.comm_ms);
    EXPECT_EQ(c.comm_bytes_per_step, want);
    EXPECT_EQ(c.comm_calls_per_step, double(L * 2 * 2));
  }
}

// 1, 2 and 4 ranks sharing one GPU (in-process communicator, fixed rank-order reduction) on the exact fp32 path,
// through check-reference (its default: fp32 GEMMs): every prompt within the check's tolerance of the fixture's
// reference logits and every greedy token equal. Measured on the H200 (bench/NOTES.md 2026-12-02): max
// |err| / max |ref| 3.1e-7 .. 1.2e-6 at 1, 2 and 4 ranks alike. On the bf16 fast path the same runs differ from one
// rank by 1.6e-3 .. 2.9e-2 in logprobs (dsv4-small; one greedy token flipped at 2 ranks): there a 1e-7 change of a
// partial sum flips bf16 roundings downstream, and that path is itself 2e-3 .. 7.5e-2 from the reference on
// dsv4-small at 1 rank. The expert split is checked where the arithmetic is exact enough to see it.
TEST(GpuMultiGpu, RanksSharingOneGpuPassCheckReference) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "dsv4-small"})
    for (int32_t n : {1, 2, 4}) check_reference_on_one_gpu(name, n, false);
}

// A rank failing in step 2 while the others wait in the in-process collective on the device: every request ends
// with the rank and the cause, and the run ends (no hang).
// With DP attention too (rank 1 then runs its own sequences, or none, and fails at the start of step 2 while rank 0
// waits in an expert exchange).
TEST(GpuMultiGpu, RankFailureOnOneGpuEndsTheRun) {
  SKIP_WITHOUT_GPU();
  const std::string model = find_model("tiny-v4-a");
  if (model.empty()) GTEST_SKIP() << "tiny-v4-a not found";
  for (const char* layout : {"EP", "DP", "TP"}) {
    SCOPED_TRACE(layout);
    dsinfer::EngineOptions o;
    o.model_dir = model;
    o.backend = "cuda";
    o.gpus = 2;
    o.data_parallel_size = std::string(layout) == "DP" ? 2 : 1;
    o.tensor_parallel_size = std::string(layout) == "TP" ? 2 : 1;
    o.communicator = "in-process";
    o.fault_injection = "1:step:2";
    o.max_model_len = 256;
    std::string err;
    auto e = dsinfer::Engine::create(o, &err);
    ASSERT_TRUE(e) << err;
    for (int i = 0; i < 3; ++i) {
      dsinfer::Request r;
      r.prompt_is_ids = true;
      r.prompt_ids = {8, 9, 10, int32_t(11 + i)};
      r.sampling.max_tokens = 20;
      r.sampling.ignore_eos = true;
      ASSERT_NE(e->submit(r, &err), 0u) << err;
    }
    std::vector<dsinfer::RequestResult> res;
    EXPECT_FALSE(e->run_until_idle(res, &err));
    EXPECT_NE(err.find("rank 1 (GPU 0) failed: injected fault in step 2"), std::string::npos) << err;
    for (auto& r : e->take_finished()) res.push_back(std::move(r));
    EXPECT_EQ(res.size(), 3u);
    for (const auto& r : res) EXPECT_NE(r.error.find("rank 1 (GPU 0) failed"), std::string::npos) << r.error;
    EXPECT_FALSE(e->unavailable_reason().empty());
  }
}

// The runner is the parallel one, each shard holding half of the experts; an uneven split is refused clearly.
TEST(GpuMultiGpu, RunnerSplitsTheExperts) {
  SKIP_WITHOUT_GPU();
  const std::string model = find_model("tiny-v4-a");
  if (model.empty()) GTEST_SKIP() << "tiny-v4-a not found";
  dsinfer::runner::RunnerOptions o;
  o.model_dir = model;
  o.backend = dsinfer::runner::Backend::kCuda;
  o.gpus = 2;
  o.communicator = comm_for_two_ranks();
  auto r = dsinfer::engine::create_runner(o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::string name = (*r)->name();
  EXPECT_NE(name.find("parallel (2 ranks on"), std::string::npos) << name;
  EXPECT_NE(name.find("experts [0, 4)"), std::string::npos) << name;  // shard 0 of 8 experts
  o.gpus = 2;
  o.expert_parallel_size = 1;
  auto bad = dsinfer::engine::create_runner(o);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("must equal --gpus"), std::string::npos);
}

// EPLB (docs/multi_gpu.md): 2 redundant slots, a rebalance every 3 steps (dozens during the run, each reloading
// the moved slots: dummy-free fixtures, so from the mapped checkpoint), same greedy tokens as without EPLB (on
// dsv4-small's fast path: up to a near-tie, below).
// EPLB is refused with --batch-invariant (a token's replica follows its index in the step), so both runs are
// non-invariant with the same schedule; 8 tokens per step keep T * topk <= 24 < 8 x the 4 experts (5 slots) a
// rank holds, so the MoE takes the same fp32 kernel with and without EPLB (ops/moe/moe_plan.h). Two GPUs or two
// ranks sharing one.
TEST(GpuMultiGpu, EplbMatchesPlainExpertParallel) {
  SKIP_WITHOUT_GPU();
  const RunSetup plain{.ranks = 2, .comm = comm_for_two_ranks(), .invariant = false, .budget = 8};
  RunSetup eplb = plain;
  eplb.eplb_interval = 3;
  compare("tiny-v4-a", plain, eplb, "2 ranks, EPLB off vs on");
  // dsv4-small's FP4 experts run the bf16 fast kernels: measured 1.07e-2 on the H200 (2 ranks on one GPU, tokens
  // identical; tiny-v4-a 9.5e-7), where a 1e-7 regrouping of the partial sums flips bf16 roundings downstream.
  // 5e-2 leaves a 4.7x margin (one measurement: a thin basis, noted in bench/NOTES.md). The same regrouping can flip
  // a greedy near-tie (session 18: with the shared expert inside the decode kernels, request 4's first token, see
  // docs/decisions.md 2026-12-04 "EPLB on dsv4-small: a near-tie": margins 0.0017 + 0.0011), so a divergence must
  // be one: both runs' own margins summed below 2 x 5e-2, the most two logprobs each within 5e-2 can move one logit
  // difference.
  compare("dsv4-small", plain, eplb, "2 ranks, EPLB off vs on", 5e-2, 2 * 5e-2);
}

// The runner reports EPLB's slots (8 experts + 2 redundant over 2 GPUs: 5 per GPU); bad sizes are refused.
TEST(GpuMultiGpu, EplbRunnerSlotsAndRefusals) {
  SKIP_WITHOUT_GPU();
  const std::string model = find_model("tiny-v4-a");
  if (model.empty()) GTEST_SKIP() << "tiny-v4-a not found";
  dsinfer::runner::RunnerOptions o;
  o.model_dir = model;
  o.backend = dsinfer::runner::Backend::kCuda;
  o.gpus = 2;
  o.communicator = comm_for_two_ranks();
  o.eplb = true;
  o.num_redundant_experts = 2;
  auto r = dsinfer::engine::create_runner(o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::string name = (*r)->name();
  EXPECT_NE(name.find("EPLB: 2 redundant experts"), std::string::npos) << name;
  EXPECT_NE(name.find("EPLB 5 expert slots"), std::string::npos) << name;
  o.num_redundant_experts = 3;
  auto odd = dsinfer::engine::create_runner(o);
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.status().message().find("must be a multiple of --gpus 2"), std::string::npos) << odd.status().message();
  o.gpus = 1;
  o.num_redundant_experts = 0;
  auto one = dsinfer::engine::create_runner(o);
  ASSERT_FALSE(one.is_ok());
  EXPECT_NE(one.status().message().find("needs --gpus > 1"), std::string::npos) << one.status().message();
}

// The EPLB remap kernel against its CPU reference (one GPU is enough): random placements (duplicates included) and
// routings with invalid ids, every rank; ids and the per-expert counters are integers: exact equality.
TEST(GpuMultiGpu, EplbRemapKernelMatchesReference) {
  if (visible_gpus() < 1) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t world = 2 + int32_t(rng() % 7), E = world * (1 + int32_t(rng() % 40)), R = world * int32_t(rng() % 5);
    const int32_t topk = 1 + int32_t(rng() % 8);
    const int64_t T = 1 + int64_t(rng() % 3000);
    std::vector<int32_t> slots(size_t(E + R));
    for (int32_t i = 0; i < E + R; ++i) slots[size_t(i)] = i < E ? i : int32_t(rng() % uint32_t(E));
    std::shuffle(slots.begin(), slots.end(), rng);
    auto p = dsinfer::parallel::make_placement(slots, E, world);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const std::vector<int32_t> table = p->table();
    std::vector<int32_t> idx(size_t(T * topk));
    for (auto& e : idx) e = int32_t(rng() % uint32_t(E + 2)) - 1;
    dsinfer::cuda::DeviceBuffer<int32_t> d_idx, d_table;
    dsinfer::cuda::DeviceBuffer<uint32_t> d_counts;
    ASSERT_TRUE(d_table.upload(table.data(), table.size()).is_ok());
    for (int32_t r = 0; r < world; ++r) {
      std::vector<int32_t> want = idx, got(idx.size());
      std::vector<uint32_t> want_counts(size_t(E), 7u), got_counts(static_cast<size_t>(E), 0u);
      dsinfer::ops::remap_experts_eplb_ref(want.data(), int64_t(want.size()), topk, table.data(), E, r,
                                                p->slots_per_rank, want_counts.data());
      ASSERT_TRUE(d_idx.upload(idx.data(), idx.size()).is_ok());
      const std::vector<uint32_t> seven(size_t(E), 7);  // counters accumulate onto what is there
      ASSERT_TRUE(d_counts.upload(seven.data(), seven.size()).is_ok());
      const dsinfer::Status st = dsinfer::ops::cuda::remap_experts_eplb_cuda(
          d_idx.data(), int64_t(idx.size()), topk, d_table.data(), E, r, p->slots_per_rank, d_counts.data(), nullptr);
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(d_idx.download(got.data(), got.size()).is_ok());
      ASSERT_TRUE(d_counts.download(got_counts.data(), got_counts.size()).is_ok());
      ASSERT_EQ(got, want) << "trial " << trial << " rank " << r;
      ASSERT_EQ(got_counts, want_counts) << "trial " << trial << " rank " << r;
    }
  }
  EXPECT_FALSE(dsinfer::ops::cuda::remap_experts_eplb_cuda(nullptr, 6, 4, nullptr, 8, 0, 5, nullptr, nullptr).is_ok());
}

// Issue 27: EP and TP ranks (the state replicated) share one prefix-cache host tier: rank 0 spills evicted blocks to
// it and every rank restores from it (ParallelRunner::copy_replicated_state), where each shard used to pin a tier of
// its own. Exact prefix caching with a block budget just above one sequence and a host tier of 8 blocks, requests one
// at a time (shared prefixes; a long unrelated prompt evicts them; a request resent after it hits the host tier),
// greedy and seeded, under --batch-invariant: 2 ranks in EP and TP give one rank's tokens, and the host tier is used
// (spills and host hits counted) in every run.
TEST(GpuMultiGpu, RanksShareOneHostTierAndEqualOneRank) {
  SKIP_WITHOUT_GPU();
  using namespace dsinfer::prefix_test;
  const std::string model = find_model("tiny-v4-a");
  if (model.empty()) GTEST_SKIP() << "tiny-v4-a not found";
  std::vector<json> reqs = shared_prefix_requests(200);
  reqs.push_back(body(seq_tokens(150, 77), 4, 8));  // its blocks push the shared ones out of the state memory
  reqs.push_back(body(reqs[5]["prompt"].get<std::vector<int32_t>>(), 5, 7));  // request 5's prompt again
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  const auto opts = [&](int32_t ranks, bool tp) {
    dsinfer::EngineOptions o = options(model, "exact", 100000.0 / double(1 << 30));
    o.backend = "cuda";
    o.numerics = "hf";
    o.batch_invariant = true;
    o.gpus = ranks;
    o.tensor_parallel_size = tp ? ranks : 1;
    o.communicator = "in-process";
    auto probe = dsinfer::test::unwrap(dsinfer::engine::Engine::create(o));
    o.prefix_cache_host_bytes = 8 * probe->state_cache().layout().block_bytes;
    return o;
  };
  const RunResult one = run_in_order(opts(1, false), reqs, order);
  EXPECT_GT(one.pm.host_spills, 0) << "the block budget did not spill to the host tier";
  EXPECT_GT(one.pm.host_hit_blocks, 0) << "no hit restored a block from the host tier";
  for (const bool tp : {false, true}) {
    SCOPED_TRACE(tp ? "2 TP ranks on one GPU" : "2 EP ranks on one GPU");
    const RunResult two = run_in_order(opts(2, tp), reqs, order);
    EXPECT_EQ(two.tokens, one.tokens);
    EXPECT_EQ(two.pm.host_spills, one.pm.host_spills);
    EXPECT_EQ(two.pm.host_hit_blocks, one.pm.host_hit_blocks);
  }
}

// Issue 27, session 19: DP attention through the whole engine at V4-Flash shapes (4 layers, dummy weights), 2 ranks
// sharing one GPU, batch 64: the exchanges and step modes side by side, for bench/NOTES.md (printed, not asserted:
// no timing asserts in tests). Asserted: every run completes with the step mode it should have and the runner's step
// events on rank 0's stream. Rows: the session-18 path (host-staged collectives, exchange of counts, synchronous;
// it now samples on the device), the exchange of counts with the device all-to-all (async), the fixed-capacity
// exchange synchronous and asynchronous, and asynchronous with the group's decode graphs.
TEST(GpuMultiGpu, DpEngineDecodeEveryExchange) {
  SKIP_WITHOUT_GPU();
  if (visible_gpus() != 1) GTEST_SKIP() << "the ranks share GPU 0 only with one visible GPU";
  const std::string cfg = find_flash_config();
  if (cfg.empty()) GTEST_SKIP() << "configs/deepseek-v4-flash not found";
  struct Row {
    const char* label;
    const char* async;
    std::vector<std::pair<const char*, const char*>> env;
    const char* mode;
  };
  const std::vector<Row> rows = {
      {"host-staged collectives, counts, sync", "off",
       {{"DSINFER_INPROC_DEVICE_REDUCE", "0"}, {"DSINFER_DP_EXCHANGE", "counts"}}, "sync (async scheduling off)"},
      {"device all-to-all, counts, async", "on", {{"DSINFER_DP_EXCHANGE", "counts"}}, "async"},
      {"fixed capacity, sync", "off", {}, "sync (async scheduling off)"},
      {"fixed capacity, async", "on", {}, "async"},
      {"fixed capacity, async, group graphs", "on", {{"DSINFER_GROUP_GRAPHS", "1"}}, "async"},
  };
  for (const Row& row : rows) {
    dsinfer::EngineDecodeOptions o;
    o.model_dir = cfg;
    o.load_format = "dummy";
    o.num_layers = 4;
    o.batch = 64;
    o.prompt_tokens = 32;
    o.decode_steps = 16;
    o.async_scheduling = row.async;
    o.gpus = 2;
    o.data_parallel_size = 2;
    o.communicator = "in-process";
    for (const auto& [k, v] : row.env) setenv(k, v, 1);
    dsinfer::EngineDecodeReport rep;
    std::string err;
    const bool ok = dsinfer::run_engine_decode_bench(o, &rep, &err);
    for (const auto& [k, v] : row.env) unsetenv(k);
    ASSERT_TRUE(ok) << row.label << ": " << err;
    EXPECT_EQ(rep.step_mode, row.mode) << row.label;
    EXPECT_TRUE(rep.device_events) << row.label;
    std::printf("DP engine decode (V4-Flash shapes, 4 layers, 2 ranks on one GPU, batch 64): %s: %s, %.3f ms a step, "
                "busy %.3f ms, idle %.3f ms (%.2f %%)\n",
                row.label, rep.step_mode.c_str(), rep.wall_ms_per_step, rep.busy_ms_per_step, rep.idle_ms_per_step,
                100.0 * rep.idle_fraction());
  }
}

// Issue 27 / 31: the ranks keep the state in DeepSeek's storage format (FP8 rows and indexer keys), as one GPU does.
// V4-Flash shapes (dummy weights, 4 layers: sliding, sliding, CSA, HCA), official numerics, --batch-invariant: one
// sequence's prompt in chunks of 1,024, 1,024 and 152 tokens, then 12 greedy decode steps, every logits row of EP,
// DP and TP attention at 2 ranks sharing one GPU against one rank, bit for bit. TP: each rank runs the FP8 kernels
// over its query heads only (CudaForwardV4::attend_fp8's h0 / heads); the split count follows the model's head
// count, and a head's output depends only on its row of q, so nothing may differ. Before 2026-12-04 the
// ParallelRunner reported fp32 rows and TP refused the FP8 state.
TEST(GpuMultiGpu, Fp8StateRanksSharingOneGpuMatchOneRankBitForBit) {
  SKIP_WITHOUT_GPU();
  if (visible_gpus() != 1) GTEST_SKIP() << "the ranks share GPU 0 only with one visible GPU";
  const std::string cfg = find_flash_config();
  if (cfg.empty()) GTEST_SKIP() << "configs/deepseek-v4-flash not found";
  struct Layout {
    const char* name;
    int32_t gpus, dp, tp;
  };
  const int64_t prompt = 2200, decode = 12, max_len = prompt + decode + 8;
  auto logits_rows = [&](const Layout& lay, std::vector<std::vector<float>>& rows) {
    dsinfer::runner::RunnerOptions o;
    o.model_dir = cfg;
    o.backend = dsinfer::runner::Backend::kCuda;
    o.load_format = dsinfer::runner::LoadFormat::kDummy;
    o.num_layers = 4;
    o.batch_invariant = true;
    o.fp8_state = true;
    o.gpus = lay.gpus;
    o.data_parallel_size = lay.dp;
    o.tensor_parallel_size = lay.tp;
    o.communicator = lay.gpus > 1 ? "in-process" : "auto";
    auto r = dsinfer::engine::create_runner(o);
    ASSERT_TRUE(r.is_ok()) << lay.name << ": " << r.status().message();
    ASSERT_EQ((*r)->kv_elem_bytes(), dsinfer::cache::kFp8StateElem) << lay.name;
    auto cache = dsinfer::check::bind_single_sequence_cache(**r, max_len);
    ASSERT_TRUE(cache.is_ok()) << lay.name << ": " << cache.status().message();
    ASSERT_TRUE(cache->layout().fp8()) << lay.name;
    const int64_t V = (*r)->config().vocab_size;
    std::vector<int32_t> toks;
    for (int64_t i = 0; i < prompt; ++i) toks.push_back(int32_t((i * 7919 + 13) % (V - 1000)));
    dsinfer::check::SoloSequence seq(**r, *cache);
    std::vector<float> l;
    int64_t done = 0;
    for (int64_t chunk : {int64_t(1024), int64_t(1024), prompt - 2048}) {
      const dsinfer::Status st = seq.step(std::span<const int32_t>(toks.data() + done, size_t(chunk)), false, l);
      ASSERT_TRUE(st.is_ok()) << lay.name << ": " << st.message();
      rows.push_back(l);
      done += chunk;
    }
    for (int64_t i = 0; i < decode; ++i) {
      const int32_t tok[1] = {int32_t(std::max_element(l.begin(), l.end()) - l.begin())};
      const dsinfer::Status st = seq.step(tok, false, l);
      ASSERT_TRUE(st.is_ok()) << lay.name << ": " << st.message();
      rows.push_back(l);
    }
  };
  std::vector<std::vector<float>> one;
  logits_rows({"one rank", 1, 1, 1}, one);
  ASSERT_EQ(one.size(), size_t(3 + decode));
  for (const auto& row : one)
    for (float v : row) ASSERT_TRUE(std::isfinite(v)) << "one rank's logits are not finite: nothing to compare";
  for (const Layout& lay : {Layout{"2 EP ranks", 2, 1, 1}, Layout{"2 DP ranks", 2, 2, 1}, Layout{"2 TP ranks", 2, 1, 2}}) {
    std::vector<std::vector<float>> got;
    logits_rows(lay, got);
    ASSERT_EQ(got.size(), one.size()) << lay.name;
    for (size_t k = 0; k < one.size(); ++k) {
      if (std::memcmp(one[k].data(), got[k].data(), one[k].size() * sizeof(float)) == 0) continue;
      double worst = 0;
      for (size_t i = 0; i < one[k].size(); ++i) worst = std::max(worst, double(std::fabs(one[k][i] - got[k][i])));
      ADD_FAILURE() << lay.name << ": logits row " << k << " (" << (k < 3 ? "prefill chunk" : "decode step")
                    << ") differs from one rank's, max |diff| " << worst;
      break;
    }
  }
}
