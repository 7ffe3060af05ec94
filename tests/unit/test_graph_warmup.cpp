// The graph warm-up (engine/graph_warmup.h) on the CPU: the steps it plans (one prompt step of the batch token budget
// ending at max_model_len, then every graph bucket largest first: each verify length, then decode with and without
// the hidden-state capture), and the engine running them at start-up through a runner that offers graph buckets (the
// CPU runner wrapped: real steps of models/dsv4-small). The plans must be valid on the bound state (slots and blocks
// the engine owns, positions within max_model_len), the capture on exactly for the prompt, verify and drafting
// decode steps and left on, and the warm-up must leave no trace in what requests produce: greedy DSpark outputs with
// the warm-up equal those without it (a sequence that read a position the warm-up wrote would differ).
#include <gtest/gtest.h>

#include <map>

#include "api/request.h"
#include "engine/engine.h"
#include "engine/graph_warmup.h"
#include "engine/runner_factory.h"
#include "test_util.h"

using namespace dsinfer;
using engine::GraphWarmup;
using engine::WarmupStep;

namespace {

using Kind = WarmupStep::Kind;

std::string describe(const std::vector<WarmupStep>& steps) {
  static const char* const kNames[] = {"prompt", "verify", "decode"};
  std::string s;
  for (const WarmupStep& w : steps)
    s += fmt::format("{}{} {}x{}{}", s.empty() ? "" : ", ", kNames[int(w.kind)], w.seqs, w.tokens,
                     w.capture ? " c" : "");
  return s;
}

// The CPU runner with graph buckets: records every step it runs and the capture it runs with.
class BucketRunner final : public runner::ModelRunner {
 public:
  explicit BucketRunner(std::unique_ptr<runner::ModelRunner> inner) : inner_(std::move(inner)) {}
  const io::ModelConfig& config() const override { return inner_->config(); }
  std::string name() const override { return "buckets(" + inner_->name() + ")"; }
  int32_t kv_elem_bytes() const override { return inner_->kv_elem_bytes(); }
  Status bind_state(const cache::StateLayout& l, int32_t slots, int32_t blocks, int64_t len) override {
    num_slots = slots;
    num_blocks = blocks;
    max_model_len = len;
    return inner_->bind_state(l, slots, blocks, len);
  }
  runner::RunnerDiagnostics& diagnostics() override { return inner_->diagnostics(); }
  std::vector<int64_t> graph_batch_sizes(int64_t max_seqs) const override {
    std::vector<int64_t> s;
    for (int64_t b : {1, 2, 4, 8})
      if (s.empty() || s.back() < max_seqs) s.push_back(b);
    return s;
  }
  Status set_hidden_capture(std::vector<int64_t> layers) override {
    capture = !layers.empty();
    return inner_->set_hidden_capture(std::move(layers));
  }
  std::span<const float> captured_hidden() const override { return inner_->captured_hidden(); }
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override {
    if (plan.num_seqs() > 0) {
      const scheduler::SeqPlan& sp = plan.seqs[0];
      const bool verify = sp.num_spec_tokens > 0;
      const Kind k = verify ? Kind::kVerify : sp.num_new_tokens > 1 ? Kind::kPrompt : Kind::kDecode;
      steps.push_back({k, plan.num_seqs(), sp.num_new_tokens, capture});
      for (const scheduler::SeqPlan& q : plan.seqs) {
        bad += q.slot < 0 || q.slot >= num_slots;
        bad += q.start_pos + q.num_new_tokens > max_model_len;
        for (cache::BlockId b : q.block_table) bad += b < 0 || b >= num_blocks;
      }
    }
    return inner_->step(plan, logits);
  }

  std::vector<WarmupStep> steps;
  bool capture = false;
  int64_t bad = 0;  // sequences outside the bound slots, blocks or max_model_len
  int32_t num_slots = 0, num_blocks = 0;
  int64_t max_model_len = 0;

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
};

EngineOptions options(const std::string& warmup) {
  EngineOptions o;
  o.model_dir = test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 192;
  o.max_num_seqs = 6;
  o.max_num_batched_tokens = 320;
  o.speculative = "dspark";
  o.seed = 3;
  o.graph_warmup = warmup;
  return o;
}

std::unique_ptr<engine::Engine> make(const std::string& warmup, BucketRunner** out) {
  runner::RunnerOptions ro;
  ro.model_dir = options(warmup).model_dir;
  auto runner = std::make_unique<BucketRunner>(test::unwrap(engine::create_runner(ro)));
  *out = runner.get();
  return test::unwrap(engine::Engine::create_with_runner(options(warmup), std::move(runner)));
}

// Greedy completions of a few prompts run together: one string of token ids per request.
std::vector<std::string> generate(engine::Engine& e) {
  const char* prompts[] = {"The quick brown fox", "def main():", "1, 2, 3, 4,", "Once upon a time"};
  std::map<scheduler::RequestId, size_t> idx;
  for (size_t i = 0; i < 4; ++i) {
    Request r;
    const auto body = nlohmann::ordered_json{{"prompt", prompts[i]}, {"max_tokens", 24}, {"temperature", 0.0}};
    EXPECT_TRUE(api::parse_request_body(body, std::nullopt, r).is_ok());
    idx[test::unwrap(e.add(r))] = i;
  }
  std::vector<std::string> out(4);
  for (int steps = 0; e.has_unfinished() && steps < 1000; ++steps) {
    const Status s = e.step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    for (const auto& r : e.take_finished())
      for (int32_t t : r.choices.at(0).token_ids) out[idx[r.id]] += std::to_string(t) + ",";
  }
  return out;
}

}  // namespace

TEST(GraphWarmup, OnePromptStepThenEveryBucketLargestFirstEachVerifyLengthThenDecode) {
  GraphWarmup w{.batch_sizes = {1, 2, 4, 8}, .max_seqs = 6, .max_batched_tokens = 1024, .max_model_len = 512,
                .max_drafts = 2};
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)),
            "prompt 2x512 c, verify 6x3 c, verify 6x2 c, decode 6x1 c, decode 6x1, verify 4x3 c, verify 4x2 c, "
            "decode 4x1 c, decode 4x1, verify 2x3 c, verify 2x2 c, decode 2x1 c, decode 2x1, verify 1x3 c, "
            "verify 1x2 c, decode 1x1 c, decode 1x1");
  // Without speculation: decode steps only, the capture off everywhere.
  w.max_drafts = 0;
  w.batch_sizes = {2, 1};
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)), "prompt 2x512, decode 2x1, decode 1x1");
  // A token budget within max_model_len is one sequence; one that does not divide makes equal sequences a few tokens
  // longer; the sequences are capped by max_seqs.
  w.max_batched_tokens = 300;
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)).substr(0, 12), "prompt 1x300");
  w.max_batched_tokens = 1100;
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)).substr(0, 12), "prompt 3x367");
  w.max_seqs = 2;
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)).substr(0, 12), "prompt 2x512");
  // Drafts beyond max_model_len - 1 are never verified.
  w = GraphWarmup{.batch_sizes = {1}, .max_seqs = 1, .max_batched_tokens = 4, .max_model_len = 3, .max_drafts = 5};
  EXPECT_EQ(describe(engine::graph_warmup_steps(w)),
            "prompt 1x3 c, verify 1x3 c, verify 1x2 c, decode 1x1 c, decode 1x1");
  // A runner without graph batch sizes: nothing.
  w.batch_sizes.clear();
  EXPECT_TRUE(engine::graph_warmup_steps(w).empty());
}

TEST(GraphWarmup, TheEngineRunsThemAtStartUpOnItsOwnStateAndRequestsSeeNoTrace) {
  BucketRunner* warm = nullptr;
  BucketRunner* cold = nullptr;
  auto with = make("on", &warm);
  auto without = make("off", &cold);
  // What the engine asked for: its max_num_seqs (6) in the buckets 1, 2, 4, 8 and DSpark's 5 drafts.
  const GraphWarmup w{.batch_sizes = {1, 2, 4, 8}, .max_seqs = 6, .max_batched_tokens = 320, .max_model_len = 192,
                      .max_drafts = 5};
  const std::string planned = describe(engine::graph_warmup_steps(w));
  EXPECT_EQ(planned.substr(0, 28), "prompt 2x160 c, verify 6x6 c");
  EXPECT_EQ(describe(warm->steps), planned);
  EXPECT_EQ(warm->bad, 0) << "a warm-up plan left the bound state";
  EXPECT_TRUE(warm->capture) << "the capture must be left on for the drafter";
  EXPECT_TRUE(cold->steps.empty()) << describe(cold->steps);
  const std::vector<std::string> a = generate(*with), b = generate(*without);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], b[i]) << "request " << i;
    EXPECT_GT(a[i].size(), 20u);
  }
  EXPECT_EQ(warm->bad, 0);
}
