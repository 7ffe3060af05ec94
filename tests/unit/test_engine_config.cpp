// Engine settings resolved once (src/engine/engine_config.*, src/speculative/speculative_config.*): every option
// checked in one place with a message naming it, "0 = the drafter's maximum" resolved there, and the one resolved
// value reaching every part that uses it (state layout, scheduler, speculator) through the paths a user takes.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "io/config.h"
#include "speculative/speculative_config.h"
#include "test_util.h"

namespace dsinfer {
namespace {

using speculative::resolve_speculative_config;
using speculative::SpecMethod;

std::string shipped_model() { return test::source_dir() + "/models/dsv4-small"; }

bool mentions(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// The shipped model's drafter block is 5 (config.json dspark_block_size); MTP-1 drafts one token.
TEST(SpeculativeConfig, ZeroMeansTheDraftersMaximumAndTheRangeIsItsMaximum) {
  const std::string m = shipped_model();
  const auto dspark = test::unwrap(resolve_speculative_config("dspark", 0, 0, 0, "auto", m));
  EXPECT_EQ(dspark.method, SpecMethod::kDspark);
  EXPECT_EQ(dspark.num_speculative_tokens, 5);
  EXPECT_EQ(dspark.draft.block_size, 5);
  EXPECT_EQ(test::unwrap(resolve_speculative_config("dspark", 3, 0, 0, "auto", m)).num_speculative_tokens, 3);
  EXPECT_EQ(test::unwrap(resolve_speculative_config("mtp1", 0, 0, 0, "auto", m)).num_speculative_tokens, 1);
  const Status over = resolve_speculative_config("dspark", 6, 0, 0, "auto", m).status();
  EXPECT_TRUE(mentions(over, "num_speculative_tokens must be in [0, 5] for the dspark drafter")) << over.message();
  EXPECT_TRUE(mentions(over, "found 6")) << over.message();
  const Status mtp = resolve_speculative_config("mtp1", 2, 0, 0, "auto", m).status();
  EXPECT_TRUE(mentions(mtp, "[0, 1] for the mtp1 drafter")) << mtp.message();
  EXPECT_TRUE(mentions(resolve_speculative_config("dspark", -1, 0, 0, "auto", m).status(), "num_speculative_tokens"));
}

TEST(SpeculativeConfig, EveryOptionIsCheckedNamingIt) {
  const std::string m = shipped_model();
  EXPECT_TRUE(mentions(resolve_speculative_config("dspark", 0, -1, 0, "auto", m).status(), "speculative_budget"));
  EXPECT_TRUE(
      mentions(resolve_speculative_config("dspark", 0, 0, 1.5, "auto", m).status(), "speculative_min_survival"));
  EXPECT_TRUE(mentions(resolve_speculative_config("dspark", 0, 0, 0, "", m).status(), "speculative_cost_model"));
  EXPECT_TRUE(mentions(resolve_speculative_config("eagle", 0, 0, 0, "auto", m).status(), "unknown speculative method"));
  // A model without a DSpark drafter: the error names its config.json.
  const std::string plain = test::own_fixture("tiny-v4-a");
  const Status none = resolve_speculative_config("dspark", 0, 0, 0, "auto", plain).status();
  EXPECT_TRUE(mentions(none, plain + "/config.json has no DSpark drafter")) << none.message();
  // Off: nothing else is looked at (no model directory needed, out-of-range values ignored).
  const auto off = test::unwrap(resolve_speculative_config("off", 99, -1, 7, "auto", "/no/such/dir"));
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.num_speculative_tokens, 0);
}

// The resolved number reaches the state layout (its ring slack) and the speculator from one resolution.
TEST(EngineConfig, OneResolutionFeedsTheStateLayoutAndTheScheduler) {
  const std::string m = shipped_model();
  const io::ModelConfig mc = test::unwrap(io::load_model_config(m));
  EngineOptions o;
  o.model_dir = m;
  o.speculative = "dspark";
  o.max_num_seqs = 3;
  o.speculative_budget = 7;
  const engine::EngineConfig c = test::unwrap(engine::resolve_engine_config(o, mc, 4));
  EXPECT_EQ(c.speculative.num_speculative_tokens, 5);
  EXPECT_EQ(c.cache.num_speculative_tokens, 5);
  EXPECT_EQ(c.scheduler.spec_budget, 7);
  EXPECT_EQ(c.scheduler.max_num_seqs, 3);
  EXPECT_EQ(c.max_model_len, std::min<int64_t>(mc.max_position_embeddings, 8192));
  EXPECT_EQ(c.tokenizer_path, m + "/tokenizer.json");
  EXPECT_GT(c.cache.budget_bytes, 0);

  auto e = test::unwrap(engine::Engine::create(o));
  EXPECT_EQ(e->state_cache().layout().num_speculative_tokens, 5);
  EXPECT_EQ(e->state_cache().layout().ring_rows, mc.sliding_window + 5);
  o.num_speculative_tokens = 2;
  auto e2 = test::unwrap(engine::Engine::create(o));
  EXPECT_EQ(e2->state_cache().layout().ring_rows, mc.sliding_window + 2);
}

TEST(EngineConfig, OptionsAreCheckedBeforeAnyWeightIsLoaded) {
  EngineOptions o;
  o.model_dir = "/no/such/model";  // never opened: every check below fails first
  const std::pair<void (*)(EngineOptions&), const char*> cases[] = {
      {[](EngineOptions& x) { x.max_num_seqs = 0; }, "max_num_seqs"},
      {[](EngineOptions& x) { x.max_num_batched_tokens = 0; }, "max_num_batched_tokens"},
      {[](EngineOptions& x) { x.max_model_len = -1; }, "max_model_len"},
      {[](EngineOptions& x) { x.state_memory_gb = -1; }, "state_memory_gb"},
      {[](EngineOptions& x) { x.sampling = "gpu"; }, "sampling"},
      {[](EngineOptions& x) { x.async_scheduling = "maybe"; }, "async_scheduling"},
      {[](EngineOptions& x) { x.graph_warmup = "always"; }, "graph_warmup"},
      {[](EngineOptions& x) { x.state_format = "fp16"; }, "state_format"},
      {[](EngineOptions& x) { x.backend = "tpu"; }, "backend"},
      {[](EngineOptions& x) { x.numerics = "fp64"; }, "numerics"}};
  for (const auto& [set, name] : cases) {
    EngineOptions x = o;
    set(x);
    const Status s = engine::Engine::create(x).status();
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_TRUE(mentions(s, name)) << s.message();
    EXPECT_FALSE(mentions(s, "/no/such/model")) << "checked after a load was tried: " << s.message();
  }
}

// Through the CLI: the flag's range is the engine's (the drafter's maximum), not a fixed bound of the parser.
TEST(EngineConfig, CliNumSpeculativeTokensIsCheckedAgainstTheDrafter) {
  test::ScratchDir d("spec_k_cli");
  const std::string base = "generate --model " + shipped_model() + " --prompt 'def f(' --max-tokens 4";
  const test::CliResult over = test::run_cli(d, base + " --speculative dspark --num-speculative-tokens 9");
  EXPECT_NE(over.rc, 0);
  EXPECT_NE(over.err.find("num_speculative_tokens must be in [0, 5] for the dspark drafter"), std::string::npos)
      << over.err;
  const test::CliResult ok = test::run_cli(d, base + " --speculative dspark --num-speculative-tokens 5");
  EXPECT_EQ(ok.rc, 0) << ok.err;
  const test::CliResult junk = test::run_cli(d, base + " --speculative dspark --num-speculative-tokens two");
  EXPECT_EQ(junk.rc, 2);
  EXPECT_NE(junk.err.find("--num-speculative-tokens expects an integer"), std::string::npos) << junk.err;
}

// The state format (issue 31): "auto" lets the backend keep DeepSeek's storage format (the CUDA runner's FP8 rows
// where they apply), "fp32" keeps fp32 rows; through the CLI, a wrong word is named with the choices. The cpu backend
// keeps fp32 rows either way, so both words generate there.
TEST(EngineConfig, StateFormatReachesTheRunnerOptions) {
  EngineOptions o;
  o.model_dir = shipped_model();
  EXPECT_TRUE(test::unwrap(engine::resolve_runner_options(o)).fp8_state);
  o.state_format = "fp32";
  EXPECT_FALSE(test::unwrap(engine::resolve_runner_options(o)).fp8_state);
  test::ScratchDir d("state_format_cli");
  const std::string base = "generate --model " + shipped_model() + " --prompt 'def f(' --max-tokens 2";
  const test::CliResult bad = test::run_cli(d, base + " --state-format fp16");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--state-format expects auto|fp32"), std::string::npos) << bad.err;
  EXPECT_EQ(test::run_cli(d, base + " --state-format fp32").rc, 0);
}

}  // namespace
}  // namespace dsinfer
