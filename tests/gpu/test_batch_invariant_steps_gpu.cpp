// Batch invariance of the CUDA runner's steps (issue 14), below the engine: one target sequence's prompt is run
// through CudaRunner with --batch-invariant under different step schedules -- one chunk; two chunks split at an
// odd position (compressed groups straddle the boundary); a tail of T = 1 steps and a T = 3 step (decode CUDA
// graphs, fixed-shape plans); ragged steps with other sequences (prefill chunks and single tokens); chunks of 384
// tokens in another slot with out-of-order blocks over randomized (stale) state, as after a preemption. The
// residual streams after every captured layer (ModelRunner::set_hidden_capture) and the logits rows of the target's
// tokens must be bit-identical (memcmp) to the one-chunk run. A failure names the schedule, the first layer whose
// rows differ (its attention type) with the first differing position and the largest difference, and the first
// differing logits row: which op family and which chunk boundary to look at.
// Cases: the shipped small model (fp32 attention kernel, hd 64; the engine test's model) and V4-Flash shapes with
// dummy weights (4 layers: sliding, sliding, CSA, HCA; tensor-core attention, FP8 streaming GEMMs, FP4 MoE fast
// kernels, a CSA top-512 that really selects). Skips without a device or the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

struct Seq {
  int32_t slot = 0;
  std::vector<int32_t> table;
  std::vector<int32_t> toks;
  int64_t done = 0;
};

// One part of a step: sequence `seq` feeds its next `count` tokens.
struct Part {
  int seq;
  int32_t count;
};
using Schedule = std::vector<std::vector<Part>>;

// all_logits: a logits row for every token (else only each part's last token, as the engine's last chunk).
scheduler::BatchPlan make_plan(std::vector<Seq>& seqs, const std::vector<Part>& parts, bool all_logits) {
  scheduler::BatchPlan p;
  p.clear();
  for (const Part& part : parts) {
    Seq& s = seqs[size_t(part.seq)];
    scheduler::SeqPlan sp;
    sp.start_pos = s.done;
    sp.num_new_tokens = part.count;
    sp.token_offset = p.num_tokens();
    sp.needs_logits = true;
    sp.slot = s.slot;
    sp.block_table = s.table;
    for (int32_t i = 0; i < part.count; ++i) {
      if (all_logits || i == part.count - 1) p.logits_token_index.push_back(p.num_tokens());
      p.token_ids.push_back(s.toks[size_t(s.done + i)]);
      p.positions.push_back(s.done + i);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    s.done += part.count;
    p.seqs.push_back(sp);
  }
  return p;
}

// The target's (sequence 0's) rows of one schedule: hidden [pos][captured layer][width], logits [pos][V] (NaN
// where the schedule had no logits row for that position).
struct Trace {
  std::vector<float> hidden, logits;
};

struct StepSetup {
  runner::RunnerOptions opts;
  std::vector<int64_t> layers;  // captured layers
  int64_t max_len = 0, target_len = 0;
  bool all_logits = true;
  int32_t state_elem = 4;  // StateCacheConfig::kv_elem_bytes (cache::kFp8StateElem: the FP8 storage format)
};

class Harness {
 public:
  explicit Harness(const StepSetup& s) : s_(s) {
    auto r = backends::create_cuda_runner(s.opts);
    if (!r.is_ok()) {
      error_ = r.status().message();
      return;
    }
    r_ = std::move(*r);
    cache::StateCacheConfig cc;
    cc.kv_elem_bytes = s.state_elem;
    cc.max_num_seqs = kSlots;
    cc.max_model_len = s.max_len;
    auto layout = cache::compute_state_layout(r_->config(), cc);
    if (!layout.is_ok()) {
      error_ = layout.status().message();
      return;
    }
    nb_ = layout->blocks_per_sequence(s.max_len);
    Status st = r_->bind_state(*layout, kSlots, int32_t(kSlots * nb_), s.max_len);
    if (st) st = r_->set_hidden_capture(s.layers);
    if (!st) error_ = st.message();
    width_ = r_->config().hc_mult * r_->config().hidden_size;
    V_ = r_->config().vocab_size;
  }
  const std::string& error() const { return error_; }

  // Sequences 0 (target), 1, 2 in the given slots; sequence k's blocks are [k*nb, (k+1)*nb), reversed if asked.
  // stale: the whole state is filled with random values first (what a reused slot / block holds).
  Trace run(const Schedule& sched, const std::vector<int32_t>& slots, bool reversed, bool stale, uint64_t seed) {
    Trace t;
    t.hidden.assign(size_t(s_.target_len) * s_.layers.size() * size_t(width_), 0.0f);
    t.logits.assign(size_t(s_.target_len) * size_t(V_), NAN);
    if (stale) {
      EXPECT_TRUE(r_->diagnostics().randomize_state(seed).is_ok());
    }
    std::vector<Seq> seqs(3);
    for (int k = 0; k < 3; ++k) {
      Seq& q = seqs[size_t(k)];
      q.slot = slots[size_t(k)];
      for (int64_t b = 0; b < nb_; ++b) q.table.push_back(int32_t(k * nb_ + (reversed ? nb_ - 1 - b : b)));
      for (int64_t i = 0; i < s_.max_len; ++i) q.toks.push_back(int32_t(8 + (6 * 131 + k * 977 + i * 29 + (i * i) % 17) % 3000));
    }
    const size_t hrow = s_.layers.size() * size_t(width_);
    for (const auto& parts : sched) {
      std::vector<int64_t> start(3);
      for (int k = 0; k < 3; ++k) start[size_t(k)] = seqs[size_t(k)].done;
      const scheduler::BatchPlan plan = make_plan(seqs, parts, s_.all_logits);
      std::vector<float> logits;
      const Status st = r_->step(plan, logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      if (!st) return t;
      const std::span<const float> hid = r_->captured_hidden();
      EXPECT_EQ(hid.size(), size_t(plan.num_tokens()) * hrow);
      if (hid.size() != size_t(plan.num_tokens()) * hrow) return t;
      int64_t off = 0, row = 0;
      for (const Part& part : parts) {
        for (int32_t i = 0; i < part.count; ++i, ++off) {
          const bool has_row = s_.all_logits || i == part.count - 1;
          if (part.seq == 0) {
            const int64_t pos = start[0] + i;
            std::memcpy(t.hidden.data() + size_t(pos) * hrow, hid.data() + size_t(off) * hrow, hrow * 4);
            if (has_row)
              std::memcpy(t.logits.data() + size_t(pos * V_), logits.data() + size_t(row * V_), size_t(V_) * 4);
          }
          row += has_row;
        }
      }
    }
    return t;
  }

  // Bitwise comparison against the reference trace; one failure message naming where it first differs.
  void compare(const Trace& ref, const Trace& got, const std::string& name) const {
    const size_t W = size_t(width_), nl = s_.layers.size();
    for (size_t li = 0; li < nl; ++li) {
      int64_t first = -1, rows = 0;
      double maxd = 0;
      for (int64_t p = 0; p < s_.target_len; ++p) {
        const float* a = ref.hidden.data() + (size_t(p) * nl + li) * W;
        const float* b = got.hidden.data() + (size_t(p) * nl + li) * W;
        if (std::memcmp(a, b, W * 4) == 0) continue;
        if (first < 0) first = p;
        ++rows;
        for (size_t i = 0; i < W; ++i) maxd = std::max(maxd, double(std::fabs(a[i] - b[i])));
      }
      if (first >= 0) {
        const int64_t l = s_.layers[li];
        const io::AttnType ty = r_->config().layer_types[size_t(l)];
        ADD_FAILURE() << name << ": layer " << l << " ("
                      << (ty == io::AttnType::CSA ? "CSA" : ty == io::AttnType::HCA ? "HCA" : "sliding")
                      << ") differs first at position " << first << ", " << rows << " of " << s_.target_len
                      << " positions differ, max |diff| " << maxd << " (earlier captured layers are identical)";
        break;  // later layers inherit the difference
      }
    }
    for (int64_t p = 0; p < s_.target_len; ++p) {
      const float* a = ref.logits.data() + size_t(p * V_);
      const float* b = got.logits.data() + size_t(p * V_);
      if (std::isnan(a[0]) || std::isnan(b[0])) continue;  // no logits row for p in one of the schedules
      if (std::memcmp(a, b, size_t(V_) * 4) == 0) continue;
      double maxd = 0;
      for (int64_t i = 0; i < V_; ++i) maxd = std::max(maxd, double(std::fabs(a[i] - b[i])));
      ADD_FAILURE() << name << ": logits of position " << p << " differ, max |diff| " << maxd;
      break;
    }
  }

  static constexpr int32_t kSlots = 4;

 private:
  StepSetup s_;
  std::unique_ptr<runner::ModelRunner> r_;
  std::string error_;
  int64_t nb_ = 0, width_ = 0, V_ = 0;
};

// The schedules of a target of L tokens (L > 1100); sequences 1 and 2 have max_len tokens of their own.
void run_schedules(const StepSetup& s) {
  Harness h(s);
  ASSERT_TRUE(h.error().empty()) << h.error();
  const int32_t L = int32_t(s.target_len);
  const Trace ref = h.run({{{0, L}}}, {0, 1, 2}, false, false, 0);
  for (float v : ref.hidden)
    ASSERT_TRUE(std::isfinite(v)) << "the reference run's hidden states are not finite: nothing to compare";
  struct Case {
    const char* name;
    Schedule sched;
    std::vector<int32_t> slots;
    bool reversed, stale;
  };
  const std::vector<Case> cases = {
      {"two chunks 97 + rest", {{{0, 97}}, {{0, L - 97}}}, {0, 1, 2}, false, false},
      {"tail of decode graphs (T = 3, T = 1)", {{{0, L - 3}}, {{1, 1}, {0, 1}, {2, 1}}, {{0, 1}}, {{0, 1}}},
       {0, 1, 2}, false, false},
      {"ragged with other sequences",
       {{{1, 300}, {0, 700}, {2, 1}}, {{2, 1}, {0, 384}, {1, 1}}, {{0, L - 1084}, {2, 1}}},
       {2, 0, 1}, false, false},
      {"chunks of 384 in another slot over stale state",
       {{{1, 100}, {0, 284}}, {{0, 384}}, {{2, 1}, {0, 383}}, {{0, 384}, {1, 1}}, {{0, L - 1435}}},
       {3, 1, 2}, true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    h.compare(ref, h.run(c.sched, c.slots, c.reversed, c.stale, 99), c.name);
  }
}

}  // namespace

// The engine test's model: the target is request 6 of GpuBatchInvariant.AloneEqualsMixed... (1781 tokens: HCA
// tokens past position 1039 have two 128-key splits).
TEST(GpuBatchInvariantSteps, SmallModelPrefillSchedulesAreBitIdentical) {
  DSI_SKIP_WITHOUT_GPU();
  const std::string model = test::checkout_path("models/dsv4-small");
  if (!std::filesystem::exists(model + "/model.safetensors")) GTEST_SKIP() << "models/dsv4-small not present";
  StepSetup s;
  s.opts.model_dir = model;
  s.opts.backend = runner::Backend::kCuda;
  s.opts.numerics = model::Numerics::hf();
  s.opts.batch_invariant = true;
  s.layers = {0, 1, 2, 3, 4};
  s.max_len = 2048;
  s.target_len = 1781;
  run_schedules(s);
}

// V4-Flash shapes (dummy weights, 4 layers): 2100 tokens so the CSA layer's indexer selects 512 of up to 525
// entries and the HCA layer (ratio 128, window 128) runs two splits for the last tokens. Captures the CSA and HCA
// layers only (16K floats per row) and compares the logits of each chunk's last token (vocabulary 129K).
TEST(GpuBatchInvariantSteps, FlashShapesPrefillSchedulesAreBitIdentical) {
  DSI_SKIP_WITHOUT_GPU();
  StepSetup s;
  s.opts.model_dir = test::checkout_path("configs/deepseek-v4-flash");
  s.opts.backend = runner::Backend::kCuda;
  s.opts.load_format = runner::LoadFormat::kDummy;
  s.opts.num_layers = 4;
  s.opts.batch_invariant = true;
  s.layers = {2, 3};
  s.max_len = 2304;
  s.target_len = 2100;
  s.all_logits = false;
  run_schedules(s);
}

// The same with the state in DeepSeek's storage format (issue 31: FP8 rows, sparse_attention_fp8 with one split in
// batch-invariant mode, the indexer over FP8 keys; randomized stale state made valid rows by reset_invalid_state).
TEST(GpuBatchInvariantSteps, FlashShapesFp8StatePrefillSchedulesAreBitIdentical) {
  DSI_SKIP_WITHOUT_GPU();
  StepSetup s;
  s.opts.model_dir = test::checkout_path("configs/deepseek-v4-flash");
  s.opts.backend = runner::Backend::kCuda;
  s.opts.load_format = runner::LoadFormat::kDummy;
  s.opts.num_layers = 4;
  s.opts.batch_invariant = true;
  s.layers = {2, 3};
  s.max_len = 2304;
  s.target_len = 2100;
  s.all_logits = false;
  s.state_elem = cache::kFp8StateElem;
  s.opts.fp8_state = true;
  run_schedules(s);
}
