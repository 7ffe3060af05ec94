// The speculative step cost model (speculative/step_cost.h: fitting, the text form, lookup) and the schedule
// against it (speculative/verify_plan.h: the common verify length, whether drafting pays), host-side only.
#include <gtest/gtest.h>

#include <cmath>

#include "speculative/step_cost.h"
#include "speculative/verify_plan.h"
#include "test_util.h"

using namespace dsinfer;
using speculative::StepCostModel;

namespace {

// A GPU-like table: batch 1 is latency-bound (a verified row costs 0.1 of a decode step), batch 64 is close to
// compute-bound (a row costs about as much as the decode step's own row).
// `draft`: a drafting time of that many ms at every batch size (a "draft" line; none for 0).
StepCostModel gpu_like(double draft = 0.0, const std::string& more = "") {
  const std::string d = draft > 0 ? "draft " + std::to_string(draft) + " " + std::to_string(draft) + " " +
                                        std::to_string(draft) + "\n"
                                  : "";
  return test::unwrap(StepCostModel::parse("dsinfer-step-cost 1\nkey test gpu\nrows 3\nseqs 1 1 1.1 1.2\n"
                                           "seqs 8 1.2 1.5 1.8\nseqs 64 4 7.5 11\n" + d + more,
                                           "table"));
}

}  // namespace

TEST(SpecCostModel, FitTakesMediansAndMakesTheTableNonDecreasing) {
  // Cells: (1 seq, 1 row) median 2; (1, 2) median 1.5 -> lifted to 2 (rows); (2, 1) median 1 -> lifted to 2 (seqs);
  // (2, 2) median 5.
  auto m = test::unwrap(StepCostModel::fit("k", {1, 2}, 2, {{2, 9, 1}, {1.5, 1.4, 1.6}, {1, 1}, {4, 6}}));
  EXPECT_DOUBLE_EQ(m.step_ms(1, 1), 2);
  EXPECT_DOUBLE_EQ(m.step_ms(1, 2), 2);
  EXPECT_DOUBLE_EQ(m.step_ms(2, 1), 2);
  EXPECT_DOUBLE_EQ(m.step_ms(2, 2), 5);
  EXPECT_FALSE(StepCostModel::fit("k", {1, 2}, 2, {{1}, {1}, {1}}).is_ok());             // cells missing
  EXPECT_FALSE(StepCostModel::fit("k", {2, 1}, 1, {{1}, {1}}).is_ok());                  // not ascending
  EXPECT_FALSE(StepCostModel::fit("k", {1}, 1, {{}}).is_ok());                           // no timing
  EXPECT_FALSE(StepCostModel::fit("k", {1}, 1, {{std::nan("")}}).is_ok());              // not finite
}

TEST(SpecCostModel, LookupInterpolatesAndExtrapolates) {
  const StepCostModel m = gpu_like();
  EXPECT_DOUBLE_EQ(m.step_ms(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(m.step_ms(8, 3), 1.8);
  EXPECT_NEAR(m.step_ms(36, 1), 1.2 + (4 - 1.2) * 28.0 / 56.0, 1e-12);  // linear between 8 and 64
  EXPECT_NEAR(m.step_ms(128, 2), 7.5 + (7.5 - 1.5) / 56.0 * 64.0, 1e-12);  // the last slope beyond 64
  EXPECT_NEAR(m.step_ms(1, 6), 1.2 * 2.0, 1e-12);  // rows beyond the table: the last column scaled
  const StepCostModel p = StepCostModel::proportional(32, 6);
  EXPECT_DOUBLE_EQ(p.step_ms(4, 3) / p.step_ms(1, 1), 12.0);
  EXPECT_DOUBLE_EQ(p.step_ms(100, 2) / p.step_ms(1, 1), 200.0);
}

TEST(SpecCostModel, TextFormRoundTripsAndErrorsNameTheLine) {
  const StepCostModel m = gpu_like();
  const StepCostModel again = test::unwrap(StepCostModel::parse(m.serialize(), "again"));
  EXPECT_EQ(again.key(), "test gpu");
  EXPECT_EQ(again.seqs(), m.seqs());
  for (int64_t n : {1, 5, 8, 40, 64, 200})
    for (int32_t r = 1; r <= 3; ++r) EXPECT_DOUBLE_EQ(again.step_ms(n, r), m.step_ms(n, r));
  auto err = [](const char* text) { return StepCostModel::parse(text, "f.txt").status().message(); };
  const StepCostModel d = test::unwrap(StepCostModel::parse("dsinfer-step-cost 1\nkey *\nrows 1\nseqs 1 1\n"
                                                             "seqs 3 2\ndraft 0.5 1.5\n", "d"));
  EXPECT_TRUE(d.has_draft_cost());
  EXPECT_DOUBLE_EQ(d.draft_ms(2), 1.0);
  EXPECT_DOUBLE_EQ(test::unwrap(StepCostModel::parse(d.serialize(), "d2")).draft_ms(5), 2.5);
  EXPECT_FALSE(m.has_draft_cost());
  EXPECT_DOUBLE_EQ(m.draft_ms(8), 0.0);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\ndraft 1 2\n").find("2 draft times for 1"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\ndraft x\n").find("f.txt:4"), std::string::npos);
  EXPECT_NE(err("").find("empty"), std::string::npos);
  EXPECT_NE(err("something else\n").find("f.txt:1"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 2\nseqs 1 1\n").find("f.txt:3"), std::string::npos);  // one time short
  EXPECT_NE(err("dsinfer-step-cost 1\nseqs 1 1\n").find("before 'rows'"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 -2\n").find("> 0"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 4 1\nseqs 2 1\n").find("ascending"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nbogus 3\n").find("unknown entry 'bogus'"), std::string::npos);
}

TEST(SpecCostModel, VerifyLengthMaximisesExpectedTokensPerMs) {
  const StepCostModel m = gpu_like();
  const std::vector<float> good{0.9f, 0.8f}, poor{0.05f, 0.01f};
  // Batch 1, no draft cost: (1 + .9 + .8) / 1.2 = 2.25 beats 1.9 / 1.1 and 1 / 1.
  auto c = speculative::best_verify_length(std::vector<std::vector<float>>{good}, 1, gpu_like(0.0));
  EXPECT_EQ(c.length, 2);
  EXPECT_NEAR(c.tokens_per_ms, 2.7 / 1.2, 1e-6);  // survival is float
  // Poor drafts: 1.05 / 1.1 and 1.06 / 1.2 do not beat decode: verify nothing.
  EXPECT_EQ(speculative::best_verify_length(std::vector<std::vector<float>>{poor}, 1, gpu_like(0.0)).length, 0);
  // Batch 64, 64 good sequences: 64 * 2.7 / 11 = 15.7 < 64 * 1.9 / 7.5 = 16.2 = 64 / 4 = 16 < ... L = 1 wins.
  std::vector<std::vector<float>> many(64, good);
  EXPECT_EQ(speculative::best_verify_length(many, 64, gpu_like(0.0)).length, 1);
  // The same with half the sequences not drafted (they add one token each, the step is still 64 wide): 32 * .9
  // more tokens for 3.5 ms more does not pay against 64 / 4.
  std::vector<std::vector<float>> half(32, good);
  EXPECT_EQ(speculative::best_verify_length(half, 64, gpu_like(0.0)).length, 0);
  // The round's draft time counts: batch 8, survival .2: without it L = 0 (8 / 1.2 = 6.67 > 9.6 / 1.5 = 6.4); with
  // 1 ms of drafting L = 1 (8 / 2.2 = 3.64 < 9.6 / 2.5 = 3.84).
  std::vector<std::vector<float>> mid(8, std::vector<float>{0.2f});
  EXPECT_EQ(speculative::best_verify_length(mid, 8, gpu_like(0.0)).length, 0);
  EXPECT_EQ(speculative::best_verify_length(mid, 8, gpu_like(1.0)).length, 1);
  EXPECT_EQ(speculative::best_verify_length({}, 8, gpu_like(0.0)).length, 0);
}

TEST(SpecCostModel, DraftingPaysOnlyWhereTheRoundBeatsDecode) {
  const StepCostModel m = gpu_like();
  const std::vector<double> a{0.7, 0.5};
  EXPECT_TRUE(speculative::drafting_pays(a, 1, gpu_like(0.2)));     // (1.7) / 1.3 = 1.31 > 1
  EXPECT_TRUE(speculative::drafting_pays(a, 1, gpu_like(0.8)));     // 1.7 / 1.9 < 1 but 2.2 / 2.0 = 1.1 > 1
  EXPECT_FALSE(speculative::drafting_pays(a, 1, gpu_like(1.5)));    // 1.7 / 2.6 and 2.2 / 2.7 < 1
  EXPECT_FALSE(speculative::drafting_pays(a, 64, gpu_like(0.0)));   // 64 * 1.7 / 7.5 = 14.5 < 16
  EXPECT_FALSE(speculative::drafting_pays(a, 4, StepCostModel::proportional(64, 3)));  // never on the cpu
  EXPECT_FALSE(speculative::drafting_pays({}, 1, gpu_like()));
}

// The host's verification of each emitted token's row ("host" entry): a speculative round pays it per emitted
// token, a plain step (sampled on the device) does not. Batch 1 of gpu_like with survival .7 / .5 and 0.2 ms of
// drafting: without host time (1 + .7 + .5) / (0.2 + 1.2) = 1.57 tokens per ms beats decode's 1; with 0.3 ms per
// row, 2.2 / (1.4 + 0.66) = 1.07 still does, and L = 1 (1.7 / (1.3 + 0.51) = 0.94) would not; with 0.5 ms per row
// nothing pays (2.2 / 2.5, 1.7 / 2.15 < 1).
TEST(SpecCostModel, HostVerifyTimePerEmittedTokenWeighsTheRound) {
  auto with_host = [](double h, double draft = 0.0) { return gpu_like(draft, "host " + std::to_string(h) + "\n"); };
  const std::vector<double> a{0.7, 0.5};
  EXPECT_TRUE(speculative::drafting_pays(a, 1, with_host(0.0, 0.2)));
  EXPECT_TRUE(speculative::drafting_pays(a, 1, with_host(0.3, 0.2)));
  EXPECT_FALSE(speculative::drafting_pays(a, 1, with_host(0.5, 0.2)));
  const std::vector<std::vector<float>> s{{0.7f, 0.5f}};
  EXPECT_EQ(speculative::best_verify_length(s, 1, with_host(0.3, 0.2)).length, 2);
  EXPECT_NEAR(speculative::best_verify_length(s, 1, with_host(0.3, 0.2)).tokens_per_ms, 2.2 / (1.4 + 0.66), 1e-6);
  const StepCostModel m = with_host(0.25);
  EXPECT_DOUBLE_EQ(m.host_row_ms(), 0.25);
  EXPECT_DOUBLE_EQ(test::unwrap(StepCostModel::parse(m.serialize(), "again")).host_row_ms(), 0.25);
  EXPECT_DOUBLE_EQ(test::unwrap(StepCostModel::fit("k", {1}, 1, {{1}}, {}, {0.3, 0.1, 0.2})).host_row_ms(), 0.2);
  auto err = [](const char* text) { return StepCostModel::parse(text, "f.txt").status().message(); };
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nhost\n").find("f.txt:4"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nhost 1 2\n").find("f.txt:4"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nhost -1\n").find(">= 0"), std::string::npos);
}

// The engine's plain step ("plain" line: sampled on the device and pipelined, cheaper than the synchronous one-row
// verify step) is the rate drafting must beat. Batch 8 of gpu_like, survival .7 / .5, 0.3 ms of drafting: against
// the one-row step (1.2 ms: 6.67 tokens per ms) 8 * 2.2 / (0.3 + 1.8) = 8.38 pays; against a 0.8 ms plain step (10
// per ms) nothing does (8 * 1.7 / 1.8 = 7.6, 8.38).
TEST(SpecCostModel, DraftingMustBeatTheEnginesPlainStep) {
  const std::string base = "dsinfer-step-cost 1\nkey test gpu\nrows 3\nseqs 1 1 1.1 1.2\nseqs 8 1.2 1.5 1.8\n";
  const StepCostModel sync = test::unwrap(StepCostModel::parse(base + "draft 0.3 0.3\n", "sync"));
  const StepCostModel plain = test::unwrap(StepCostModel::parse(base + "draft 0.3 0.3\nplain 0.5 0.8\n", "plain"));
  const std::vector<double> a{0.7, 0.5};
  EXPECT_FALSE(sync.has_plain_cost());
  EXPECT_DOUBLE_EQ(sync.plain_ms(8), 1.2);  // the one-row step without the line
  EXPECT_TRUE(speculative::drafting_pays(a, 8, sync));
  EXPECT_TRUE(plain.has_plain_cost());
  EXPECT_DOUBLE_EQ(plain.plain_ms(8), 0.8);
  EXPECT_NEAR(plain.plain_ms(4), 0.5 + 0.3 * 3.0 / 7.0, 1e-12);
  EXPECT_FALSE(speculative::drafting_pays(a, 8, plain));
  EXPECT_DOUBLE_EQ(test::unwrap(StepCostModel::parse(plain.serialize(), "again")).plain_ms(8), 0.8);
  // Fitted: medians, made non-decreasing along the batch sizes.
  const StepCostModel f = test::unwrap(StepCostModel::fit("k", {1, 2}, 1, {{1}, {2}}, {}, {}, {{0.6, 0.4, 0.5}, {0.3}}));
  EXPECT_DOUBLE_EQ(f.plain_ms(1), 0.5);
  EXPECT_DOUBLE_EQ(f.plain_ms(2), 0.5);
  EXPECT_FALSE(StepCostModel::fit("k", {1, 2}, 1, {{1}, {2}}, {}, {}, {{0.5}, {}}).is_ok());
  auto err = [](const char* text) { return StepCostModel::parse(text, "f.txt").status().message(); };
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nplain 1 2\n").find("2 plain step times for 1"),
            std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nplain 0\n").find("> 0"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nplain x\n").find("f.txt:4"), std::string::npos);
}

// The measured one-wait round ("round" line: the verify step of max_rows rows, the device's acceptance and the next
// proposal, one host wait) is the device's part of a speculative step: a round verifying fewer rows takes off the
// verify rows it does not run; the host's row time per emitted token is added in both forms. Batch 1 of steps of 0.5
// / 0.55 / 0.6 ms, drafting 0.3 ms, a host row of 0.01 ms, a plain step of 0.4 ms (2.5 tokens per ms, 2.625 with a
// 5 % margin), survival .7 / .5: the parts make a round verifying both drafts 0.6 + 0.3 + 0.022 = 0.922 ms (2.2
// tokens: 2.39 per ms, no pay); a measured round of 0.75 ms at 3 rows (0.772 ms: 2.85 per ms) pays, L = 1 (0.717
// ms: 2.37 per ms) would not. The device's part is never cheaper than its verify step alone.
TEST(SpecCostModel, TheMeasuredRoundReplacesItsPartsWhereTheEngineRunsIt) {
  const std::string base = "dsinfer-step-cost 1\nkey test gpu\nrows 3\nseqs 1 0.5 0.55 0.6\nseqs 8 1.2 1.5 1.8\n"
                           "draft 0.3 0.4\nhost 0.01\nplain 0.4 0.8\n";
  const StepCostModel parts = test::unwrap(StepCostModel::parse(base, "parts"));
  const StepCostModel round = test::unwrap(StepCostModel::parse(base + "round 0.75 2.5\n", "round"));
  EXPECT_FALSE(parts.has_round_cost());
  EXPECT_TRUE(round.has_round_cost());
  EXPECT_NEAR(parts.round_ms(1, 3, 2.2), 0.6 + 0.3 + 0.01 * 2.2, 1e-12);
  EXPECT_NEAR(round.round_ms(1, 3, 2.2), 0.75 + 0.022, 1e-12);
  EXPECT_NEAR(round.round_ms(1, 2, 1.7), 0.7 + 0.017, 1e-12);
  EXPECT_NEAR(round.round_ms(1, 1, 0.0), 0.65, 1e-12);
  EXPECT_NEAR(round.round_ms(4, 3, 0.0), 0.75 + (2.5 - 0.75) * 3.0 / 7.0, 1e-12);  // interpolated like the steps
  EXPECT_NEAR(round.round_ms(8, 1, 0.0), 2.5 - 1.8 + 1.2, 1e-12);
  const std::vector<double> a{0.7, 0.5};
  EXPECT_FALSE(speculative::drafting_pays(a, 1, parts, 0.05));
  EXPECT_TRUE(speculative::drafting_pays(a, 1, round, 0.05));
  const std::vector<std::vector<float>> s{{0.7f, 0.5f}};
  EXPECT_EQ(speculative::best_verify_length(s, 1, round).length, 2);
  EXPECT_NEAR(speculative::best_verify_length(s, 1, round).tokens_per_ms, 2.2 / 0.772, 1e-6);
  // The break-even acceptance falls with the cheaper round.
  EXPECT_LT(speculative::break_even_acceptance(2, 1, round, 0.05),
            speculative::break_even_acceptance(2, 1, parts, 0.05));
  // Dropped where the engine's rounds are two-wait: the parts again.
  const StepCostModel two = round.without_round();
  EXPECT_FALSE(two.has_round_cost());
  EXPECT_DOUBLE_EQ(two.round_ms(1, 3, 2.2), parts.round_ms(1, 3, 2.2));
  // Without the host's row time in the measured round (the drain gate's one-wait rounds): the device's part alone;
  // a model without a round line keeps the host time of its parts.
  EXPECT_NEAR(round.without_round_host().round_ms(1, 3, 2.2), 0.75, 1e-12);
  EXPECT_NEAR(round.without_round_host().round_ms(4, 3, 5.0), 0.75 + (2.5 - 0.75) * 3.0 / 7.0, 1e-12);
  EXPECT_DOUBLE_EQ(parts.without_round_host().round_ms(1, 3, 2.2), parts.round_ms(1, 3, 2.2));
  EXPECT_DOUBLE_EQ(round.without_round_host().without_round().round_ms(1, 3, 2.2), parts.round_ms(1, 3, 2.2));
  // A measured round below its verify step (timing noise) is the verify step.
  const StepCostModel low = test::unwrap(StepCostModel::parse(base + "round 0.5 2.5\n", "low"));
  EXPECT_DOUBLE_EQ(low.round_ms(1, 3, 0.0), 0.6);
  EXPECT_DOUBLE_EQ(low.round_ms(1, 1, 0.0), 0.5);
  // Text form and fit: medians, made non-decreasing along the batch sizes; errors name the line.
  EXPECT_DOUBLE_EQ(test::unwrap(StepCostModel::parse(round.serialize(), "again")).round_ms(8, 3, 0.0), 2.5);
  const StepCostModel f = test::unwrap(
      StepCostModel::fit("k", {1, 2}, 1, {{1}, {2}}, {}, {}, {}, {{0.9, 1.4, 1.1}, {1.0, 0.8, 0.9}}));
  EXPECT_DOUBLE_EQ(f.round_ms(1, 1, 0.0), 1.1);
  EXPECT_DOUBLE_EQ(f.round_ms(2, 1, 0.0), 2.0);  // 1.1 lifted from 0.9, then at least the 2 ms verify step
  EXPECT_FALSE(StepCostModel::fit("k", {1, 2}, 1, {{1}, {2}}, {}, {}, {}, {{0.5}, {}}).is_ok());
  auto err = [](const char* text) { return StepCostModel::parse(text, "f.txt").status().message(); };
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nround 1 2\n").find("2 round times for 1"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nround 0\n").find("> 0"), std::string::npos);
  EXPECT_NE(err("dsinfer-step-cost 1\nrows 1\nseqs 1 1\nround x\n").find("f.txt:4"), std::string::npos);
}
