// Fidelity mode of check-reference (issue 10 must-show; include/dsinfer/diagnostics.h, src/check/fidelity_check.h):
// on the CPU backend the fast and the exact path are the same computation, so a run on the shipped model must
// report 100 % top-1 agreement and zero KL / logit difference; the KL helper against closed forms; the stream's
// seeds; bad options; the CLI's output and exit codes (the thresholds decide the exit code).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "check/fidelity_check.h"
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

// The CPU test of the fidelity mode: two sequences (one cut short) of the shipped model, exact == fast.
TEST(FidelityCheck, CpuBackendAgreesWithItself) {
  CheckReferenceOptions o;
  o.model_dir = shipped_model();
  o.fidelity = true;
  o.fidelity_positions = 40;
  o.fidelity_seq_len = 24;
  CheckReferenceReport rep;
  std::string error;
  ASSERT_TRUE(check_reference(o, &rep, &error)) << error;
  const FidelityResult& f = rep.fidelity;
  EXPECT_EQ(f.positions, 40);
  EXPECT_EQ(f.sequences, 2);
  EXPECT_EQ(f.top1_matches, 40);
  EXPECT_EQ(f.top1, 1.0);
  EXPECT_EQ(f.mean_kl, 0.0);
  EXPECT_EQ(f.max_kl, 0.0);
  EXPECT_EQ(f.max_logit_diff, 0.0);
  EXPECT_TRUE(rep.ok);
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
}
