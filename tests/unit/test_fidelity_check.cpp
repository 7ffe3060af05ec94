// Fidelity mode of check-reference (issue 10 must-show; include/dsinfer/diagnostics.h, src/check/fidelity_check.h):
// a runner with a planted change to its logits must be reported as arithmetic predicts (the CPU backend's fast and
// exact path are one computation, so comparing them proves nothing); the KL helper against closed forms; the stream's
// seeds; bad options; the CLI's output and exit codes (the thresholds decide the exit code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "check/fidelity_check.h"
#include "engine/runner_factory.h"
#include "runner/model_runner.h"
#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace dsinfer;

namespace {
std::string shipped_model() { return test::source_dir() + "/models/dsv4-small"; }
}  // namespace

TEST(FidelityCheck, KlFromLogitsClosedForms) {
  const float a[2] = {0.0f, 0.0f}, b[2] = {0.0f, float(std::log(3.0))};  // p = (1/2, 1/2), q = (1/4, 3/4)
  const double want = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0);
  EXPECT_NEAR(check::kl_from_logits(a, b, 2), want, 1e-7);
  const float c[3] = {1.0f, -2.0f, 0.5f}, d[3] = {11.0f, 8.0f, 10.5f};  // a shift does not change softmax
  EXPECT_NEAR(check::kl_from_logits(c, d, 3), 0.0, 1e-12);
  const float e[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isinf(check::kl_from_logits(a, e, 2)));
}

TEST(FidelityCheck, SeedsAreThePromptIdsThenTheGreedyIds) {
  auto f = io::SafetensorsFile::open(shipped_model() + "/reference.safetensors");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  auto seeds = check::fidelity_seeds(*f);
  ASSERT_TRUE(seeds.is_ok()) << seeds.status().message();
  ASSERT_EQ(seeds->size(), 5u);
  const auto& t = f->tensors();
  const io::TensorView &in = t.at("prompt.1.input_ids"), &gr = t.at("prompt.1.greedy_ids");
  ASSERT_EQ((*seeds)[1].size(), size_t(in.numel() + gr.numel()));
  EXPECT_EQ((*seeds)[1].front(), int32_t(in.int_at(0)));
  EXPECT_EQ((*seeds)[1].back(), int32_t(gr.int_at(gr.numel() - 1)));
}

// A "fast" runner that is the exact CPU runner with a known change to its logits, so that what the fidelity check
// must report follows from arithmetic alone (the CPU runner's exact and fast paths are the same computation, so a
// run against itself could not fail).
namespace {

class PerturbedRunner final : public runner::ModelRunner {
 public:
  enum class Kind { kBoostToken, kNegate };
  PerturbedRunner(std::unique_ptr<runner::ModelRunner> inner, Kind kind, int32_t token, float delta)
      : inner_(std::move(inner)), kind_(kind), token_(token), delta_(delta) {}
  const io::ModelConfig& config() const override { return inner_->config(); }
  std::string name() const override { return "perturbed(" + inner_->name() + ")"; }
  int32_t kv_elem_bytes() const override { return inner_->kv_elem_bytes(); }
  Status bind_state(const cache::StateLayout& l, int32_t slots, int32_t blocks, int64_t len) override {
    return inner_->bind_state(l, slots, blocks, len);
  }
  runner::RunnerDiagnostics& diagnostics() override { return inner_->diagnostics(); }
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override {
    DSI_RETURN_IF_ERROR(inner_->step(plan, logits));
    const size_t V = size_t(config().vocab_size);
    for (size_t r = 0; r * V < logits.size(); ++r) {
      if (kind_ == Kind::kBoostToken) logits[r * V + size_t(token_)] += delta_;
      else
        for (size_t k = 0; k < V; ++k) logits[r * V + k] = -logits[r * V + k];
    }
    return Status::ok();
  }

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
  Kind kind_;
  int32_t token_;
  float delta_;
};

std::unique_ptr<runner::ModelRunner> cpu_runner() {
  runner::RunnerOptions ro;
  ro.model_dir = shipped_model();
  return test::unwrap(engine::create_runner(ro));
}

check::Fidelity fidelity_against(PerturbedRunner::Kind kind, float delta) {
  auto exact = cpu_runner();
  PerturbedRunner fast(cpu_runner(), kind, /*token=*/7, delta);
  auto ids = test::unwrap(io::SafetensorsFile::open(shipped_model() + "/reference.safetensors"));
  check::FidelityOptions o;
  o.positions = 40;
  o.seq_len = 24;
  o.chunk = 16;  // sequences of 24 go in two chunks: rows of both chunks must line up
  return test::unwrap(check::check_fidelity(*exact, fast, test::unwrap(check::fidelity_seeds(ids)), o));
}

}  // namespace

// Raising one logit by delta moves softmax from p to q with q_t = p_t e^delta / Z, Z = 1 + p_t (e^delta - 1), so
// KL(p || q) = log Z - p_t delta: the log-moment-generating function of a Bernoulli(p_t) minus its mean times delta,
// which Hoeffding's lemma bounds by delta^2 / 8, and which is 0 only where p_t is 0 or 1. Every logit differs by
// delta at token 7 and by nothing elsewhere.
TEST(FidelityCheck, ReportsAPlantedLogitShift) {
  const float delta = 0.5f;
  const check::Fidelity f = fidelity_against(PerturbedRunner::Kind::kBoostToken, delta);
  EXPECT_EQ(f.positions, 40);
  EXPECT_EQ(f.sequences, 2);  // 24 + 16 positions
  EXPECT_NEAR(f.max_logit_diff, delta, 1e-5);
  EXPECT_GT(f.mean_kl, 0.0);
  EXPECT_LE(f.mean_kl, f.max_kl);
  EXPECT_LE(f.max_kl, double(delta) * delta / 8);
  EXPECT_GE(f.top1_matches, 1);  // a shift of 0.5 nats changes few argmaxes, and never adds positions
  EXPECT_LE(f.top1_matches, 40);
}

// Negated logits turn every argmax into an argmin: no position can agree (the shipped model's rows are not flat).
TEST(FidelityCheck, NegatedLogitsAgreeNowhere) {
  const check::Fidelity f = fidelity_against(PerturbedRunner::Kind::kNegate, 0.0f);
  EXPECT_EQ(f.positions, 40);
  EXPECT_EQ(f.top1_matches, 0);
  EXPECT_GT(f.mean_kl, 1.0);
  EXPECT_GT(f.max_logit_diff, 1.0);
}

// Through the public API the CPU backend's fidelity run reports its positions and sequences (its fast and exact
// paths are one computation there, so only the bookkeeping is checked here; the planted tests above check the
// comparison itself).
TEST(FidelityCheck, PublicApiCountsPositionsAndSequences) {
  CheckReferenceOptions o;
  o.model_dir = shipped_model();
  o.fidelity = true;
  o.fidelity_positions = 40;
  o.fidelity_seq_len = 24;
  CheckReferenceReport rep;
  std::string error;
  ASSERT_TRUE(check_reference(o, &rep, &error)) << error;
  EXPECT_EQ(rep.fidelity.positions, 40);
  EXPECT_EQ(rep.fidelity.sequences, 2);
  EXPECT_TRUE(rep.prompts.empty());
}

TEST(FidelityCheck, BadOptionsAreErrors) {
  CheckReferenceOptions o;
  o.model_dir = shipped_model();
  o.fidelity = true;
  CheckReferenceReport rep;
  std::string error;
  o.fidelity_positions = 0;
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("positions"), std::string::npos) << error;
  o.fidelity_positions = 8;
  o.fidelity_seq_len = 1 << 20;  // beyond max_position_embeddings (4096)
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("max_position_embeddings"), std::string::npos) << error;
  o.fidelity_seq_len = 8;
  o.min_top1 = 1.5;
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("min_top1"), std::string::npos) << error;
}

TEST(FidelityCheck, CliReportsAndThresholdsDecideTheExitCode) {
  test::ScratchDir d("fidelity_cli");
  const std::string base = "check-reference --backend cpu --fidelity --positions 12 --seq-len 12 --model " + shipped_model();
  test::CliResult r = test::run_cli(d, base);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("top-1 agreement 100.000% (12/12)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  r = test::run_cli(d, base + " --min-top1 2");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  r = test::run_cli(d, base + " --positions x");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  // --fidelity-chunk: the teacher-forced steps' size (5 + 5 + 2 here), the same 12 positions compared
  r = test::run_cli(d, base + " --fidelity-chunk 5");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("top-1 agreement 100.000% (12/12)"), std::string::npos) << r.out;
  r = test::run_cli(d, base + " --fidelity-chunk 0");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--fidelity-chunk"), std::string::npos) << r.err;
}
