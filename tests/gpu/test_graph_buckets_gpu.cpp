// Graph buckets (issue 31; backends/cuda/step/step_plan.h graph_bucket_seqs / pad_fixed_step): on one rank the CUDA
// runner runs a decode or uniform verify step of S sequences padded to its bucket (3 -> 4, 5..8 -> 8, 9 -> 16), the
// padding sequences on a slot and block of their own. Under --batch-invariant every row is independent of the
// others, so a padded step's rows must equal the exact-shape step's bit for bit (the same runner code with
// DSINFER_CUDA_GRAPH_BUCKETS=0): the logits of every decode and verify step, over several steps (a padding sequence
// that wrote into a real sequence's state would show in the steps after), with graphs on. Cases: the shipped model
// (hf) and V4-Flash shapes (dummy weights, 4 layers, FP8 state: sliding, CSA and HCA layers). Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_layout.h"
#include "cuda/gpu_test_util.h"
#include "runner/model_runner.h"
#include "scheduler/batch_plan.h"
#include "tests/build_paths.h"

using namespace dsinfer;

namespace {

constexpr int32_t kSlots = 10;

struct BucketCase {
  runner::RunnerOptions opts;
  int64_t max_len = 512;
  int32_t prompt = 9;  // sequence q's prompt: prompt + 5 q tokens
  int32_t state_elem = 4;
};

// S sequences: a ragged prefill (s.prompt + 5 q tokens for sequence q), then `decode` steps of one token each, then two verify
// steps of 1 + 2 tokens each (every token a logits row). Tokens are a fixed function of (sequence, position).
// Returns every logits row of every step, in order.
Result<std::vector<float>> run(const BucketCase& s, bool buckets, int32_t S, int32_t decode) {
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
  const int64_t V = r.config().vocab_size;
  std::vector<std::vector<cache::BlockId>> tables(static_cast<size_t>(S));
  std::vector<int64_t> done(static_cast<size_t>(S), 0);
  for (int32_t q = 0; q < S; ++q)  // blocks of the sequences in reverse order, slots from the last one down
    for (int64_t b = 0; b < nb; ++b) tables[size_t(q)].push_back(cache::BlockId((S - 1 - q) * nb + b));
  auto token = [&](int32_t q, int64_t pos) { return int32_t((pos * 131 + q * 17 + 5) % V); };
  std::vector<float> all, logits;
  auto step = [&](int32_t per_seq, bool prefill) -> Status {
    scheduler::BatchPlan p;
    p.clear();
    for (int32_t q = 0; q < S; ++q) {
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
    all.insert(all.end(), logits.begin(), logits.end());
    return Status::ok();
  };
  DSI_RETURN_IF_ERROR(step(0, true));
  for (int32_t d = 0; d < decode; ++d) DSI_RETURN_IF_ERROR(step(1, false));
  for (int32_t v = 0; v < 2; ++v) DSI_RETURN_IF_ERROR(step(3, false));
  return all;
}

void expect_padded_equals_exact(const BucketCase& s) {
  for (int32_t S : {3, 5, 9}) {
    SCOPED_TRACE("sequences " + std::to_string(S));
    auto exact = run(s, false, S, 4);
    ASSERT_TRUE(exact.is_ok()) << exact.status().message();
    auto padded = run(s, true, S, 4);
    ASSERT_TRUE(padded.is_ok()) << padded.status().message();
    ASSERT_EQ(exact->size(), padded->size());
    size_t finite = 0, first_diff = exact->size();
    for (size_t i = 0; i < exact->size(); ++i) {
      finite += std::isfinite((*exact)[i]) ? 1 : 0;
      if (first_diff == exact->size() && std::memcmp(&(*exact)[i], &(*padded)[i], 4) != 0) first_diff = i;
    }
    EXPECT_EQ(finite, exact->size()) << "the exact-shape run's logits are not all finite: nothing to compare";
    EXPECT_EQ(first_diff, exact->size()) << "first differing logit at flat index " << first_diff << ": exact "
                                         << (*exact)[first_diff] << ", padded " << (*padded)[first_diff];
  }
}

}  // namespace

TEST(GpuGraphBuckets, PaddedStepsEqualExactShapesBitForBitOnTheShippedModel) {
  DSI_SKIP_WITHOUT_GPU();
  const std::string model = std::string(DSINFER_SOURCE_DIR) + "/models/dsv4-small";
  if (!std::filesystem::exists(model + "/model.safetensors")) GTEST_SKIP() << "models/dsv4-small not present";
  BucketCase s;
  s.opts.model_dir = model;
  s.opts.backend = runner::Backend::kCuda;
  s.opts.numerics = model::Numerics::hf();
  s.opts.batch_invariant = true;
  expect_padded_equals_exact(s);
}

TEST(GpuGraphBuckets, PaddedStepsEqualExactShapesBitForBitAtFlashShapesWithFp8State) {
  DSI_SKIP_WITHOUT_GPU();
  BucketCase s;
  s.opts.model_dir = std::string(DSINFER_SOURCE_DIR) + "/configs/deepseek-v4-flash";
  s.opts.backend = runner::Backend::kCuda;
  s.opts.load_format = runner::LoadFormat::kDummy;
  s.opts.num_layers = 4;
  s.opts.batch_invariant = true;
  s.opts.fp8_state = true;
  s.state_elem = cache::kFp8StateElem;
  s.prompt = 126;  // the first sequence's decode steps cross the HCA layer's first 128-token group
  expect_padded_equals_exact(s);
}
