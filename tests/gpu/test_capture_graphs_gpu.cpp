// Hidden-state capture switched on and off (ModelRunner::set_hidden_capture; a speculative engine turns it off at rest
// and on again to draft, Engine::set_spec_capture): the CUDA runner keeps the decode graphs of both modes
// (hidden_capture_cuda.cpp), so a switch replays a graph instead of recapturing every graph of the batch (what it did
// until session 15). On the shipped model, one sequence's prefill then 12 graphed decode steps with the capture
// switched at every step must give the logits of the same steps without capture bit for bit, at the capture-on steps
// the captured states of a run with the capture always on, and capture 2 graphs in all (one per mode). Skips
// without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <span>
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

constexpr int32_t kSlots = 2;
constexpr int64_t kMaxLen = 128;
constexpr int32_t kPrompt = 9;
constexpr int32_t kDecode = 12;
const std::vector<int64_t> kTapped = {1, 3};

enum class Capture { kOff, kOn, kSwitched };

struct Run {
  std::vector<std::vector<float>> logits;  // per step
  std::vector<std::vector<float>> hidden;  // per step (empty where the capture was off)
  int64_t graphs = 0;
};

Result<Run> run(Capture mode) {
  runner::RunnerOptions o;
  o.model_dir = std::string(DSINFER_SOURCE_DIR) + "/models/dsv4-small";
  o.backend = runner::Backend::kCuda;
  o.numerics = model::Numerics::hf();
  DSI_ASSIGN_OR_RETURN(std::unique_ptr<runner::ModelRunner> created, backends::create_cuda_runner(o));
  runner::ModelRunner& r = *created;
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 4;
  cc.max_num_seqs = kSlots;
  cc.max_model_len = kMaxLen;
  DSI_ASSIGN_OR_RETURN(const cache::StateLayout layout, cache::compute_state_layout(r.config(), cc));
  const int64_t nb = layout.blocks_per_sequence(kMaxLen);
  DSI_RETURN_IF_ERROR(r.bind_state(layout, kSlots, int32_t(kSlots * nb), kMaxLen));
  std::vector<cache::BlockId> table;
  for (int64_t b = 0; b < nb; ++b) table.push_back(cache::BlockId(b));
  const int64_t V = r.config().vocab_size;
  int64_t done = 0;
  Run out;
  std::vector<float> logits;
  for (int32_t s = 0; s <= kDecode; ++s) {
    // The prefill captures in both capturing runs (the capture buffer is sized there, before any graph).
    const bool on = mode == Capture::kOn || (mode == Capture::kSwitched && (s == 0 || s % 2 == 1));
    DSI_RETURN_IF_ERROR(r.set_hidden_capture(on ? kTapped : std::vector<int64_t>{}));
    const int32_t n = s == 0 ? kPrompt : 1;
    scheduler::BatchPlan p;
    p.clear();
    scheduler::SeqPlan sp;
    sp.start_pos = done;
    sp.num_new_tokens = n;
    sp.token_offset = 0;
    sp.is_prefill = s == 0;
    sp.needs_logits = true;
    sp.logits_row = 0;
    sp.slot = 0;
    sp.block_table = table;
    for (int32_t i = 0; i < n; ++i) {
      if (i == n - 1) p.logits_token_index.push_back(p.num_tokens());
      p.token_ids.push_back(int32_t(((done + i) * 131 + 5) % V));
      p.positions.push_back(done + i);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    p.seqs.push_back(sp);
    done += n;
    DSI_RETURN_IF_ERROR(r.step(p, logits));
    out.logits.push_back(logits);
    const std::span<const float> h = r.captured_hidden();
    out.hidden.emplace_back(h.begin(), h.end());
    if (on && h.empty()) return Status::errorf("step {}: the capture is on but nothing was captured", s);
    if (!on && !h.empty()) return Status::errorf("step {}: the capture is off but {} floats came back", s, h.size());
  }
  out.graphs = r.diagnostics().graphs_captured();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace

TEST(GpuCaptureGraphs, SwitchingTheCaptureReplaysTheGraphsOfBothModes) {
  DSI_SKIP_WITHOUT_GPU();
  if (!std::filesystem::exists(std::string(DSINFER_SOURCE_DIR) + "/models/dsv4-small/model.safetensors"))
    GTEST_SKIP() << "models/dsv4-small not present";
  auto off = run(Capture::kOff);
  ASSERT_TRUE(off.is_ok()) << off.status().message();
  auto on = run(Capture::kOn);
  ASSERT_TRUE(on.is_ok()) << on.status().message();
  auto sw = run(Capture::kSwitched);
  ASSERT_TRUE(sw.is_ok()) << sw.status().message();
  for (int32_t s = 0; s <= kDecode; ++s) {
    EXPECT_TRUE(same_bits(off->logits[size_t(s)], on->logits[size_t(s)])) << "capture copies changed step " << s;
    EXPECT_TRUE(same_bits(off->logits[size_t(s)], sw->logits[size_t(s)])) << "switched run, step " << s;
    if (!sw->hidden[size_t(s)].empty())
      EXPECT_TRUE(same_bits(on->hidden[size_t(s)], sw->hidden[size_t(s)])) << "captured states, step " << s;
  }
  EXPECT_EQ(off->graphs, 1);  // the decode graph of one sequence (the prefill is not graphed)
  EXPECT_EQ(on->graphs, 1);
  EXPECT_EQ(sw->graphs, 2) << "a switch of the capture recaptured the decode graphs";
}
