// The step cost model's resolution at engine start-up (engine/step_cost_setup.h) through the public paths: an
// Engine created with --speculative-cost-model PATH profiles the model's verify steps and drafting rounds on the
// CPU backend once and writes them there, reads them back next time, profiles again when the file is for another
// model or shape, accepts a hand-written table (key "*"), and refuses a malformed file naming it and the line; the
// CLI flag reaches the same code (cost-model steps reported, a bad file an error exit).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_test_util.h"
#include "engine/engine.h"
#include "speculative/step_cost.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

EngineOptions options(const std::string& cost_model) {
  EngineOptions o;
  o.model_dir = test::source_dir() + "/models/dsv4-small";
  o.max_num_seqs = 2;  // a small grid: the cpu profile takes about a second
  o.max_model_len = 128;
  o.speculative = "dspark";
  o.speculative_cost_model = cost_model;
  return o;
}

}  // namespace

TEST(SpecCostSetup, ProfiledOnceThenReadAgainReprofiledWhenStaleAndBadFilesNamed) {
  const test::ScratchDir dir("spec_cost_setup");
  const std::string file = dir.str() + "/cost.txt";
  ASSERT_TRUE(engine::Engine::create(options(file)).is_ok());
  const std::string first = test::slurp(file);
  const auto m = test::unwrap(speculative::StepCostModel::parse(first, file));
  EXPECT_NE(m.key().find("cpu ("), std::string::npos) << m.key();
  EXPECT_NE(m.key().find("dspark k 5"), std::string::npos) << m.key();
  EXPECT_EQ(m.seqs(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.max_rows(), 6);
  EXPECT_TRUE(m.has_draft_cost());
  EXPECT_FALSE(m.has_plain_cost());  // the cpu runner samples on the host: its plain step is the one-row step
  EXPECT_FALSE(m.has_round_cost());  // nor has the cpu drafter the one-wait round
  // Read back, not profiled again: the file is unchanged (a new profile's timings would differ in some digit).
  ASSERT_TRUE(engine::Engine::create(options(file)).is_ok());
  EXPECT_EQ(test::slurp(file), first);
  // Another model's table: profiled again and rewritten with this model's key.
  std::ofstream(file) << "dsinfer-step-cost 1\nkey some other model\nrows 6\nseqs 1 1 1 1 1 1 1\n";
  ASSERT_TRUE(engine::Engine::create(options(file)).is_ok());
  EXPECT_EQ(test::unwrap(speculative::StepCostModel::parse(test::slurp(file), file)).key(), m.key());
  // A hand-written table for any model is used as it is.
  const std::string any = "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 1.1 1.2 1.3 1.4 1.5\ndraft 0\n";
  std::ofstream(file) << any;
  ASSERT_TRUE(engine::Engine::create(options(file)).is_ok());
  EXPECT_EQ(test::slurp(file), any);
  // Malformed: an error naming the option, the file and the line.
  std::ofstream(file) << "dsinfer-step-cost 1\nrows 6\nseqs 1 1 2\n";
  auto bad = engine::Engine::create(options(file));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("speculative_cost_model"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find(file + ":3"), std::string::npos) << bad.status().message();
  // "off" needs no file; an empty value is refused by name.
  EXPECT_TRUE(engine::Engine::create(options("off")).is_ok());
  auto empty = engine::Engine::create(options(""));
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("speculative_cost_model"), std::string::npos);
}

TEST(SpecCostSetup, CliFlagSchedulesAndRefusesABadFile) {
  const test::ScratchDir dir("spec_cost_cli");
  const std::string table = dir.str() + "/t.txt", in = dir.str() + "/in.jsonl";
  std::ofstream(table) << "dsinfer-step-cost 1\nkey *\nrows 6\nseqs 1 1 1.1 1.2 1.3 1.4 1.5\ndraft 0\n";
  std::ofstream(in) << R"({"custom_id": "a", "body": {"prompt": "def add(a, b):\n    return", "max_tokens": 24,)"
                    << R"( "temperature": 0, "ignore_eos": true}})" << "\n";
  const std::string base = "generate --model " + test::source_dir() + "/models/dsv4-small --input " + in +
                           " --output " + dir.str() + "/o.jsonl --max-num-seqs 1 --speculative dspark";
  test::CliResult r = test::run_cli(dir, base + " --speculative-cost-model " + table);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("cost-model steps"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("cost-model steps 0 "), std::string::npos) << r.err;  // the table chose lengths
  std::ofstream(table) << "not a table\n";
  r = test::run_cli(dir, base + " --speculative-cost-model " + table);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(table + ":1"), std::string::npos) << r.err;
}
