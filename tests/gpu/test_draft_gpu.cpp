// GPU parity of the CUDA drafters (backends/cuda/speculative/draft_cuda.h) against the CPU reference drafters (speculative/dspark.h,
// speculative/mtp1.h) on the shipped models/dsv4-small: both ingest the same captured hidden states (random, two rounds:
// a prefill longer than the window, then 3 positions that wrap the ring), then propose. With forced draws (the same
// predecessor tokens on both sides) every draft-logits row and confidence logit is compared; with greedy draws
// the proposals must be identical (a difference only where the CPU row's top two logits are a near tie). The device
// pick (ProposeItem::pick_argmax; DSpark's round in a CUDA graph, padded batch) must equal the host draws.
// Thresholds (normalised L2 of each logits row): exact mode (RunnerOptions::exact_gemm: every drafter GEMM / MoE on
// the fp32 CUDA-core kernels) 2e-3 — fp32 products and accumulation against the reference's double accumulation,
// through two mHC layers (Sinkhorn), norms and the router, leave ~1e-5; 2e-3 also absorbs a rare fp32-vs-double
// router near tie on one token. Fast mode (bf16 tensor-core GEMMs above 8 rows) 5e-2: chained bf16-operand GEMMs
// (2^-9 relative per operand, ~10 in a row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "cuda/gpu_test_util.h"
#include "engine/runner_factory.h"
#include "speculative/drafter.h"
#include "test_util.h"
#include "checkout_path.h"
#include "scoped_env.h"

namespace {

using namespace dsinfer;

std::string model_dir() { return test::checkout_path("models/dsv4-small"); }
// The speculative settings of `method` with every other option at its default (drafts per step: the maximum).
speculative::SpeculativeConfig spec_config(speculative::SpecMethod method) {
  return test::unwrap(speculative::resolve_speculative_config(speculative::spec_method_name(method), 0, 0, 0, "off",
                                                              model_dir()));
}

struct Draws {
  std::map<std::pair<size_t, int32_t>, std::vector<float>> logits;
  std::vector<speculative::Proposal> props;
};

struct Case {
  speculative::SpecMethod method;
  bool exact;
  double tol;
};

// Feeds one drafter the two ingest rounds and proposes; forced = draw fixed tokens instead of the argmax; pick =
// the items ask for the drafter's own argmax (ProposeItem::pick_argmax); third: a third live sequence (slot 1,
// never ingested: DSpark reads its zeroed ring) so the batch of 3 is padded to 4. The slot-2 item drafts from
// context_start 15 (a resume after a gap: DSpark reads its ring from there on).
// separate: the second ingest runs on its own (Drafter::flush) instead of inside the propose's graph.
Draws drive(speculative::Drafter& d, int64_t width, int64_t V, bool forced, bool pick = false, bool third = false,
            bool separate = false) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<float> h1(size_t(90 * width)), h2(size_t(6 * width));
  for (float& x : h1) x = u(rng);
  for (float& x : h2) x = u(rng);
  std::vector<int32_t> na(70), nb(20), na2(3), nb2(3);
  for (auto* v : {&na, &nb, &na2, &nb2})
    for (int32_t& t : *v) t = tok(rng);
  const std::vector<speculative::IngestItem> r1{{0, 0, 70, 0, na}, {2, 0, 20, 70, nb}};
  const std::vector<speculative::IngestItem> r2{{0, 70, 3, 0, na2}, {2, 20, 3, 3, nb2}};
  EXPECT_TRUE(d.ingest(r1, h1).is_ok());
  EXPECT_TRUE(d.ingest(r2, h2).is_ok());
  if (separate) EXPECT_TRUE(d.flush().is_ok());
  const int32_t k = d.max_drafts();
  const std::vector<speculative::ProposeItem> items{{0, 73, na2[2], k, pick},
                                             {1, 5, 7, third ? std::min(2, k) : 0, pick},
                                             {2, 23, nb2[2], std::min(3, k), pick, /*context_start=*/15}};
  Draws out;
  auto draw = [&](size_t i, int32_t kk, std::span<const float> lg) -> int32_t {
    out.logits[{i, kk}] = std::vector<float>(lg.begin(), lg.end());
    if (forced) return int32_t((i * 977 + size_t(kk) * 131 + 5) % size_t(V));
    return int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
  };
  const Status s = d.propose(items, draw, out.props);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

void check(const Case& c) {
  runner::RunnerOptions ro;
  ro.model_dir = model_dir();
  ro.backend = runner::Backend::kCuda;
  ro.exact_gemm = c.exact;
  auto runner = engine::create_runner(ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().message();
  const io::ModelConfig& cfg = (*runner)->config();
  auto gpu = (*runner)->create_drafter(spec_config(c.method), 4);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  ASSERT_TRUE(*gpu) << "the CUDA runner returned no device drafter";
  auto cpu = speculative::create_cpu_drafter(spec_config(c.method), cfg, 4);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  const int64_t width = int64_t((*cpu)->tapped_layers().size()) * cfg.hc_mult * cfg.hidden_size;
  ASSERT_EQ((*cpu)->tapped_layers(), (**gpu).tapped_layers());

  for (bool forced : {true, false}) {
    const Draws a = drive(**cpu, width, cfg.vocab_size, forced);
    const Draws b = drive(**gpu, width, cfg.vocab_size, forced);
    ASSERT_EQ(a.props.size(), b.props.size());
    ASSERT_EQ(a.logits.size(), b.logits.size());
    double worst = 0;
    for (const auto& [key, ref] : a.logits) {
      auto it = b.logits.find(key);
      ASSERT_TRUE(it != b.logits.end());
      const double err = cuda::test::normalized_error(it->second, ref);
      worst = std::max(worst, err);
      if (forced) EXPECT_LT(err, c.tol) << "item " << key.first << " draft " << key.second;
    }
    for (size_t i = 0; i < a.props.size(); ++i) {
      if (forced) {
        ASSERT_EQ(a.props[i].confidence_logits.size(), b.props[i].confidence_logits.size());
        for (size_t k = 0; k < a.props[i].confidence_logits.size(); ++k)
          EXPECT_NEAR(b.props[i].confidence_logits[k], a.props[i].confidence_logits[k],
                      c.tol * std::max(1.0f, std::fabs(a.props[i].confidence_logits[k])));
        EXPECT_EQ(a.props[i].tokens, b.props[i].tokens);  // the forced tokens themselves
        continue;
      }
      // Greedy: identical up to a near tie of the CPU row (then the rows after it are not comparable).
      const auto& x = a.props[i].tokens;
      const auto& y = b.props[i].tokens;
      ASSERT_EQ(x.size(), y.size());
      for (size_t k = 0; k < x.size(); ++k) {
        if (x[k] == y[k]) continue;
        std::vector<float> row = a.logits.at({i, int32_t(k)});
        const float mx = *std::max_element(row.begin(), row.end());
        const float gap = row[size_t(x[k])] - row[size_t(y[k])];
        EXPECT_LT(gap, c.tol * std::max(1.0f, std::fabs(mx)) * 10) << "item " << i << " draft " << k;
        break;
      }
    }
    std::printf("%s drafter (%s, %s draws): worst normalised logits error %.3g over %zu rows\n",
                speculative::spec_method_name(c.method), c.exact ? "exact" : "fast", forced ? "forced" : "greedy", worst,
                a.logits.size());
  }
}

// The device pick (greedy-plain requests: argmax and confidence on the device, DSpark's round in a CUDA graph)
// against the same drafter's host draws: the same kernels compute the same logits, so tokens must be identical and
// confidence logits equal; a second pick call replays the captured graph and must repeat the result.
void check_pick(speculative::SpecMethod method, bool exact) {
  runner::RunnerOptions ro;
  ro.model_dir = model_dir();
  ro.backend = runner::Backend::kCuda;
  ro.exact_gemm = exact;
  auto runner = engine::create_runner(ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().message();
  const io::ModelConfig& cfg = (*runner)->config();
  auto gpu = (*runner)->create_drafter(spec_config(method), 4);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  ASSERT_TRUE(*gpu);
  const int64_t width = int64_t((**gpu).tapped_layers().size()) * cfg.hc_mult * cfg.hidden_size;
  const bool third = method == speculative::SpecMethod::kDspark;  // MTP-1 refuses a never-ingested slot
  const Draws host = drive(**gpu, width, cfg.vocab_size, false, false, third);
  const Draws pick = drive(**gpu, width, cfg.vocab_size, false, true, third);
  const Draws again = drive(**gpu, width, cfg.vocab_size, false, true, third);
  EXPECT_TRUE(pick.logits.empty()) << "the DrawFn was called for pick_argmax items";
  ASSERT_EQ(host.props.size(), pick.props.size());
  ASSERT_EQ(host.props.size(), again.props.size());
  size_t drafts = 0;
  for (size_t i = 0; i < host.props.size(); ++i) {
    EXPECT_EQ(host.props[i].tokens, pick.props[i].tokens) << "item " << i;
    EXPECT_EQ(pick.props[i].tokens, again.props[i].tokens) << "item " << i;
    ASSERT_EQ(host.props[i].confidence_logits.size(), pick.props[i].confidence_logits.size());
    ASSERT_EQ(again.props[i].confidence_logits.size(), pick.props[i].confidence_logits.size());
    // The same kernel on the same inputs; 1e-5 only allows for a reduction-order change of the bias GEMM.
    for (size_t k = 0; k < host.props[i].confidence_logits.size(); ++k) {
      const float ref = host.props[i].confidence_logits[k], tol = 1e-5f * std::max(1.0f, std::fabs(ref));
      EXPECT_NEAR(pick.props[i].confidence_logits[k], ref, tol) << "item " << i << " draft " << k;
      EXPECT_NEAR(again.props[i].confidence_logits[k], ref, tol) << "item " << i << " draft " << k;
    }
    drafts += pick.props[i].tokens.size();
  }
  EXPECT_GT(drafts, 0u);
}

// DSpark's ingest inside the propose's graph (its rows padded to the batch's ingest shape, slot -1 rows skipped)
// against the same ingest run on its own: forced draws, so every draft-logits row and confidence logit is compared.
// The padded ingest's GEMMs may take another kernel for their row count, so the bound is the exact-mode parity
// tolerance (2e-3, measured against the CPU reference above), not bitwise.
void check_fused_ingest(bool exact) {
  runner::RunnerOptions ro;
  ro.model_dir = model_dir();
  ro.backend = runner::Backend::kCuda;
  ro.exact_gemm = exact;
  auto runner = engine::create_runner(ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().message();
  const io::ModelConfig& cfg = (*runner)->config();
  auto gpu = (*runner)->create_drafter(spec_config(speculative::SpecMethod::kDspark), 4);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  ASSERT_TRUE(*gpu);
  const int64_t width = int64_t((**gpu).tapped_layers().size()) * cfg.hc_mult * cfg.hidden_size;
  for (bool third : {false, true}) {
    const Draws sep = drive(**gpu, width, cfg.vocab_size, true, false, third, true);
    const Draws fused = drive(**gpu, width, cfg.vocab_size, true, false, third, false);
    ASSERT_EQ(sep.logits.size(), fused.logits.size());
    ASSERT_GT(sep.logits.size(), 0u);
    double worst = 0, worst_conf = 0;
    for (const auto& [key, ref] : sep.logits) {
      const double err = cuda::test::normalized_error(fused.logits.at(key), ref);
      worst = std::max(worst, err);
      EXPECT_LT(err, 2e-3) << "item " << key.first << " draft " << key.second;
    }
    for (size_t i = 0; i < sep.props.size(); ++i) {
      EXPECT_EQ(sep.props[i].tokens, fused.props[i].tokens);
      ASSERT_EQ(sep.props[i].confidence_logits.size(), fused.props[i].confidence_logits.size());
      for (size_t k = 0; k < sep.props[i].confidence_logits.size(); ++k) {
        const float ref = sep.props[i].confidence_logits[k];
        worst_conf = std::max(worst_conf, double(std::fabs(fused.props[i].confidence_logits[k] - ref)));
        EXPECT_NEAR(fused.props[i].confidence_logits[k], ref, 2e-3 * std::max(1.0f, std::fabs(ref)));
      }
    }
    std::printf("dspark fused ingest (%s, batch %d): worst normalised logits error %.3g, confidence %.3g\n",
                exact ? "exact" : "fast", third ? 3 : 2, worst, worst_conf);
  }
}

// `nseq` sequences (slots 0..nseq-1) ingest 40 random capture rows each, then all propose a whole block greedily on
// the device (pick_argmax: the round's graph with its picks); twice, the second replaying the graph.
std::vector<speculative::Proposal> drive_picks(speculative::Drafter& d, int64_t width, int64_t V, int32_t nseq) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  constexpr int32_t kRows = 40;
  std::vector<float> h(size_t(nseq) * kRows * size_t(width));
  for (float& x : h) x = u(rng);
  std::vector<std::vector<int32_t>> next(static_cast<size_t>(nseq), std::vector<int32_t>(static_cast<size_t>(kRows)));
  std::vector<speculative::IngestItem> ing;
  std::vector<speculative::ProposeItem> items;
  for (int32_t s = 0; s < nseq; ++s) {
    for (int32_t& t : next[size_t(s)]) t = tok(rng);
    ing.push_back({s, 0, kRows, s * kRows, next[size_t(s)]});
    items.push_back({s, kRows, next[size_t(s)].back(), d.max_drafts(), true});
  }
  EXPECT_TRUE(d.ingest(ing, h).is_ok());
  std::vector<speculative::Proposal> out, again;
  auto draw = [](size_t, int32_t, std::span<const float>) -> int32_t { return -1; };
  EXPECT_TRUE(d.propose(items, draw, out).is_ok());
  EXPECT_TRUE(d.propose(items, draw, again).is_ok());
  EXPECT_EQ(out.size(), again.size());
  for (size_t i = 0; i < out.size() && i < again.size(); ++i) {
    EXPECT_EQ(out[i].tokens, again[i].tokens);
    EXPECT_EQ(out[i].confidence_logits, again[i].confidence_logits);
  }
  return out;
}

// A fused path against the kernels it replaces on the same drafter inputs (env = "1" on the first drafter, "0" on
// the second):
// DSINFER_DSPARK_FUSED_PICKS, the picks (one draft_picks_kernel against g x (bias GEMM + draft_pick) and the Markov
// gather); DSINFER_DSPARK_FUSED_MOE, the MoE (draft_moe_cuda's two launches against moe_cuda's exact path). Where the
// replaced GEMMs take the fp32 skinny kernel (exact mode at every batch; the default mode at <= 8 padded sequences for
// the picks, <= 8 tokens for the MoE) the fused kernels sum in its order, so drafted tokens and confidence logits are
// equal bit for bit. Batches 1, 3 (4 padded), 11 (16) and 40 (64: several work items a warp).
void check_fused(const char* env, bool exact, int32_t nseq) {
  runner::RunnerOptions ro;
  ro.model_dir = model_dir();
  ro.backend = runner::Backend::kCuda;
  ro.exact_gemm = exact;
  auto runner = engine::create_runner(ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().message();
  const io::ModelConfig& cfg = (*runner)->config();
  const auto make = [&](bool fused) {
    const test::ScopedEnv on(env, fused ? "1" : "0");  // read once, by the drafter's construction
    return (*runner)->create_drafter(spec_config(speculative::SpecMethod::kDspark), nseq);
  };
  auto fused = make(true);
  auto perpos = make(false);
  ASSERT_TRUE(fused.is_ok() && perpos.is_ok());
  ASSERT_TRUE(*fused && *perpos);
  const int64_t width = int64_t((**fused).tapped_layers().size()) * cfg.hc_mult * cfg.hidden_size;
  const auto a = drive_picks(**fused, width, cfg.vocab_size, nseq);
  const auto b = drive_picks(**perpos, width, cfg.vocab_size, nseq);
  ASSERT_EQ(a.size(), b.size());
  size_t drafts = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "sequence " << i;
    ASSERT_EQ(a[i].confidence_logits.size(), b[i].confidence_logits.size());
    for (size_t k = 0; k < a[i].confidence_logits.size(); ++k)
      EXPECT_EQ(std::memcmp(&a[i].confidence_logits[k], &b[i].confidence_logits[k], sizeof(float)), 0)
          << "sequence " << i << " draft " << k << ": " << a[i].confidence_logits[k] << " vs "
          << b[i].confidence_logits[k];
    drafts += a[i].tokens.size();
  }
  EXPECT_EQ(drafts, size_t(nseq) * size_t((**fused).max_drafts()));
}

}  // namespace

TEST(DraftGpu, DsparkFusedIngestMatchesSeparate) {
  DSI_SKIP_WITHOUT_GPU();
  check_fused_ingest(true);
}

TEST(DraftGpu, DsparkMatchesCpuReferenceExact) {
  DSI_SKIP_WITHOUT_GPU();
  check({speculative::SpecMethod::kDspark, true, 2e-3});
}

TEST(DraftGpu, DsparkMatchesCpuReferenceFast) {
  DSI_SKIP_WITHOUT_GPU();
  check({speculative::SpecMethod::kDspark, false, 5e-2});
}

TEST(DraftGpu, Mtp1MatchesCpuReferenceExact) {
  DSI_SKIP_WITHOUT_GPU();
  check({speculative::SpecMethod::kMtp1, true, 2e-3});
}

TEST(DraftGpu, Mtp1MatchesCpuReferenceFast) {
  DSI_SKIP_WITHOUT_GPU();
  check({speculative::SpecMethod::kMtp1, false, 5e-2});
}

TEST(DraftGpu, DsparkDevicePickEqualsHostDraws) {
  DSI_SKIP_WITHOUT_GPU();
  check_pick(speculative::SpecMethod::kDspark, false);
  check_pick(speculative::SpecMethod::kDspark, true);
}

TEST(DraftGpu, Mtp1DevicePickEqualsHostDraws) {
  DSI_SKIP_WITHOUT_GPU();
  check_pick(speculative::SpecMethod::kMtp1, false);
}

TEST(DraftGpu, DsparkFusedPicksEqualPerPositionKernels) {
  DSI_SKIP_WITHOUT_GPU();
  for (int32_t nseq : {3, 11, 40}) check_fused("DSINFER_DSPARK_FUSED_PICKS", true, nseq);
  check_fused("DSINFER_DSPARK_FUSED_PICKS", false, 3);
}

TEST(DraftGpu, DsparkFusedMoeEqualsMoeKernels) {
  DSI_SKIP_WITHOUT_GPU();
  for (int32_t nseq : {1, 3, 11}) check_fused("DSINFER_DSPARK_FUSED_MOE", true, nseq);
  check_fused("DSINFER_DSPARK_FUSED_MOE", false, 1);
}
