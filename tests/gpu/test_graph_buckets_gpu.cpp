// Graph buckets (issue 31; backends/cuda/step/step_plan.h graph_bucket_seqs / pad_fixed_step): on one rank the CUDA
// runner runs a decode or uniform verify step of S sequences padded to its bucket (3 -> 4, 5..8 -> 8, 9 -> 16), the
// padding sequences on a slot and block of their own. Under --batch-invariant every row is independent of the
// others, so a padded step's rows must equal the exact-shape step's bit for bit (the same runner code with
// DSINFER_CUDA_GRAPH_BUCKETS=0): the logits of every decode and verify step, over several steps (a padding sequence
// that wrote into a real sequence's state would show in the steps after), with graphs on; and the graphs captured
// show that the padding ran (two batch sizes of one bucket share a graph). Cases: the shipped model
// (hf) and V4-Flash shapes (dummy weights, 4 layers, FP8 state: sliding, CSA and HCA layers). Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_layout.h"
#include "cuda/gpu_test_util.h"
#include "runner/model_runner.h"
#include "scheduler/batch_plan.h"
#include "checkout_path.h"

using namespace dsinfer;

namespace {

constexpr int32_t kSlots = 12;

struct BucketCase {
  runner::RunnerOptions opts;
  int64_t max_len = 512;
  int32_t prompt = 9;  // sequence q's prompt: prompt + 5 q tokens
  int32_t state_elem = 4;
};

struct RunResult {
  std::vector<float> logits;  // every logits row of every step, in order
  int64_t graphs = 0;         // step graphs the runner captured
  runner::RunnerDiagnostics::StepGapTimes events;  // with step events on
};

// S sequences: a ragged prefill (s.prompt + 5 q tokens for sequence q), `decode` steps of one token each, then, as
// two requests have finished, `decode` steps of the first S - 2 sequences and two verify steps of 1 + 2 tokens each
// (every token a logits row). Tokens are a fixed function of (sequence, position).
// events: the runner's step events on (RunnerDiagnostics::set_step_events) for every step.
Result<RunResult> run(const BucketCase& s, bool buckets, int32_t S, int32_t decode, bool events = false) {
  if (buckets)
    unsetenv("DSINFER_CUDA_GRAPH_BUCKETS");
  else
    setenv("DSINFER_CUDA_GRAPH_BUCKETS", "0", 1);
  auto created = backends::create_cuda_runner(s.opts);
  unsetenv("DSINFER_CUDA_GRAPH_BUCKETS");
  if (!created) return created.status();
  runner::ModelRunner& r = **created;
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = s.state_elem;
  cc.max_num_seqs = kSlots;
  cc.max_model_len = s.max_len;
  DSI_ASSIGN_OR_RETURN(const cache::StateLayout layout, cache::compute_state_layout(r.config(), cc));
  const int64_t nb = layout.blocks_per_sequence(s.max_len);
  DSI_RETURN_IF_ERROR(r.bind_state(layout, kSlots, int32_t(kSlots * nb), s.max_len));
  if (events) DSI_RETURN_IF_ERROR(r.diagnostics().set_step_events(true));
  const int64_t V = r.config().vocab_size;
  std::vector<std::vector<cache::BlockId>> tables(static_cast<size_t>(S));
  std::vector<int64_t> done(static_cast<size_t>(S), 0);
  for (int32_t q = 0; q < S; ++q)  // blocks of the sequences in reverse order, slots from the last one down
    for (int64_t b = 0; b < nb; ++b) tables[size_t(q)].push_back(cache::BlockId((S - 1 - q) * nb + b));
  auto token = [&](int32_t q, int64_t pos) { return int32_t((pos * 131 + q * 17 + 5) % V); };
  RunResult out;
  std::vector<float> logits;
  auto step = [&](int32_t seqs, int32_t per_seq, bool prefill) -> Status {
    scheduler::BatchPlan p;
    p.clear();
    for (int32_t q = 0; q < seqs; ++q) {
      const int32_t n = prefill ? s.prompt + 5 * q : per_seq;
      scheduler::SeqPlan sp;
      sp.start_pos = done[size_t(q)];
      sp.num_new_tokens = n;
      sp.token_offset = p.num_tokens();
      sp.is_prefill = prefill;
      sp.needs_logits = true;
      sp.logits_row = p.num_logits();
      sp.num_spec_tokens = prefill ? 0 : per_seq - 1;
      sp.slot = kSlots - 1 - q;
      sp.block_table = tables[size_t(q)];
      for (int32_t i = 0; i < n; ++i) {
        if (!prefill || i == n - 1) p.logits_token_index.push_back(p.num_tokens());
        p.token_ids.push_back(token(q, done[size_t(q)] + i));
        p.positions.push_back(done[size_t(q)] + i);
      }
      p.cu_seqlens.push_back(p.num_tokens());
      p.seqs.push_back(sp);
      done[size_t(q)] += n;
    }
    DSI_RETURN_IF_ERROR(r.step(p, logits));
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    return Status::ok();
  };
  DSI_RETURN_IF_ERROR(step(S, 0, true));
  for (int32_t d = 0; d < decode; ++d) DSI_RETURN_IF_ERROR(step(S, 1, false));
  for (int32_t d = 0; d < decode; ++d) DSI_RETURN_IF_ERROR(step(S - 2, 1, false));
  for (int32_t v = 0; v < 2; ++v) DSI_RETURN_IF_ERROR(step(S - 2, 3, false));
  out.graphs = r.diagnostics().graphs_captured();
  if (events) {
    DSI_ASSIGN_OR_RETURN(out.events, r.diagnostics().step_gap_times());
  }
  return out;
}

void expect_padded_equals_exact(const BucketCase& s) {
  for (int32_t S : {3, 7, 11}) {  // decode 3 -> 4, then 1; 7 -> 8, then 5 -> 8; 11 -> 16, then 9 -> 16
    SCOPED_TRACE("sequences " + std::to_string(S));
    auto exact = run(s, false, S, 3);
    ASSERT_TRUE(exact.is_ok()) << exact.status().message();
    auto padded = run(s, true, S, 3);
    ASSERT_TRUE(padded.is_ok()) << padded.status().message();
    const std::vector<float>& a = exact->logits;
    const std::vector<float>& b = padded->logits;
    ASSERT_EQ(a.size(), b.size());
    size_t finite = 0, first_diff = a.size();
    for (size_t i = 0; i < a.size(); ++i) {
      finite += std::isfinite(a[i]) ? 1 : 0;
      if (first_diff == a.size() && std::memcmp(&a[i], &b[i], 4) != 0) first_diff = i;
    }
    EXPECT_EQ(finite, a.size()) << "the exact-shape run's logits are not all finite: nothing to compare";
    EXPECT_EQ(first_diff, a.size()) << "first differing logit at flat index " << first_diff << ": exact "
                                    << a[std::min(first_diff, a.size() - 1)] << ", padded "
                                    << b[std::min(first_diff, b.size() - 1)];
    // The graphs show that the padding ran: exact shapes capture decode at S and S - 2 and verify at S - 2; the
    // buckets capture one decode and one verify graph where S and S - 2 share a bucket (7, 5: 8; 11, 9: 16).
    EXPECT_EQ(exact->graphs, 3);
    EXPECT_EQ(padded->graphs, S == 3 ? 3 : 2);
  }
}

// The shipped model (hf numerics) under --batch-invariant; an empty model_dir when the checkout has no weights.
BucketCase shipped_case() {
  BucketCase s;
  const std::string model = test::checkout_path("models/dsv4-small");
  if (!std::filesystem::exists(model + "/model.safetensors")) return s;
  s.opts.model_dir = model;
  s.opts.backend = runner::Backend::kCuda;
  s.opts.numerics = model::Numerics::hf();
  s.opts.batch_invariant = true;
  return s;
}

}  // namespace

TEST(GpuGraphBuckets, PaddedStepsEqualExactShapesBitForBitOnTheShippedModel) {
  DSI_SKIP_WITHOUT_GPU();
  const BucketCase s = shipped_case();
  if (s.opts.model_dir.empty()) GTEST_SKIP() << "models/dsv4-small not present";
  expect_padded_equals_exact(s);
}

// Session 28: plain steps (logits to the host: prefill, graphed decode and verify) record step events too (the
// model bench's prefill reads the device's busy time from them). Every step is counted, the device was busy a
// positive time, and the events change no logit.
TEST(GpuGraphBuckets, PlainStepsCountStepEventsAndKeepTheirBits) {
  DSI_SKIP_WITHOUT_GPU();
  const BucketCase s = shipped_case();
  if (s.opts.model_dir.empty()) GTEST_SKIP() << "models/dsv4-small not present";
  auto plain = run(s, true, 3, 3);
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  auto timed = run(s, true, 3, 3, true);
  ASSERT_TRUE(timed.is_ok()) << timed.status().message();
  EXPECT_EQ(timed->events.steps, 1 + 3 + 3 + 2) << "a prefill, 3 + 3 decode steps and 2 verify steps";
  EXPECT_GT(timed->events.busy_ms, 0.0);
  EXPECT_GE(timed->events.idle_ms, 0.0);
  ASSERT_EQ(plain->logits.size(), timed->logits.size());
  EXPECT_EQ(std::memcmp(plain->logits.data(), timed->logits.data(), plain->logits.size() * 4), 0);
}

TEST(GpuGraphBuckets, PaddedStepsEqualExactShapesBitForBitAtFlashShapesWithFp8State) {
  DSI_SKIP_WITHOUT_GPU();
  BucketCase s;
  s.opts.model_dir = test::checkout_path("configs/deepseek-v4-flash");
  s.opts.backend = runner::Backend::kCuda;
  s.opts.load_format = runner::LoadFormat::kDummy;
  s.opts.num_layers = 4;
  s.opts.batch_invariant = true;
  s.opts.fp8_state = true;
  s.state_elem = cache::kFp8StateElem;
  s.prompt = 126;  // the first sequence's decode steps cross the HCA layer's first 128-token group
  expect_padded_equals_exact(s);
}
