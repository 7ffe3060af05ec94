// End to end on the GPU: the CUDA runner's V4.1 forward (exact path) against the CPU runner on the tiny-v41 fixtures with the same
// ragged schedule -- three sequences with chunked prefill (chunks 7 / 13 / 17, one sequence decoding while others
// prefill) and then decode steps, logits of every token compared. hf-noqat: within 1e-5 of the CPU (the fixture
// tolerance against transformers; both sides are fp32 with double reductions). With the QAT quantizers on, an
// ulp can flip a quantized value (reference.json), and these token streams were not chosen free of near ties: once a
// code flips, the rest of that sequence differs (H200: tiny-v41-b 57 of 79 rows within 1e-3, max 0.31), so hf only
// needs identical argmax on >= 95 % of the rows; hf-noqat above is the exactness check of the same schedule. This covers what check-reference does not: chunks crossing ratio groups, window and n-gram
// history at step boundaries, and several sequences (slots, block tables) in one step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_runner.h"
#include "backends/cuda/parallel/parallel_runner.h"
#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_layout.h"
#include "backends/cuda/weights/device_weights_v41.h"
#include "cuda/device.h"
#include "cuda/device_bytes.h"
#include "cuda/gpu_test_util.h"
#include "dsinfer/diagnostics.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/deepseek_v41.h"
#include "model/host_state.h"
#include "model/export_v41.h"
#include "scheduler/batch_plan.h"
#include "test_util.h"
#include "v41_dump.h"

using namespace dsinfer;

namespace {

struct Seq {
  int32_t slot;
  std::vector<cache::BlockId> table;
  std::vector<int32_t> toks;
  int64_t done = 0;
};

// One step: each (sequence, count) feeds its next `count` tokens; every token gets a logits row.
scheduler::BatchPlan make_plan(std::vector<std::pair<Seq*, int32_t>> parts) {
  scheduler::BatchPlan p;
  p.clear();
  for (auto& [s, n] : parts) {
    scheduler::SeqPlan sp;
    sp.start_pos = s->done;
    sp.num_new_tokens = n;
    sp.token_offset = p.num_tokens();
    sp.needs_logits = true;
    sp.slot = s->slot;
    sp.block_table = s->table;
    for (int32_t i = 0; i < n; ++i) {
      p.logits_token_index.push_back(p.num_tokens());
      p.token_ids.push_back(s->toks[size_t(s->done + i)]);
      p.positions.push_back(s->done + i);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    s->done += n;
    p.seqs.push_back(sp);
  }
  return p;
}

// The fixture relative to the repository root (the GPU machine runs the tests there, in a copied tree) or in the
// source tree here; empty when neither exists.
std::string find_fixture(const std::string& name) {
  for (const std::string& d : {"tests/fixtures/" + name, test::own_fixture(name)})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

// gpus > 1: the ParallelRunner's expert-parallel ranks, sharing this GPU through the in-process communicator.
// dir: the model folder when it is not the fixture itself (a converted checkpoint; `fixture` then only labels).
void run_schedule(const std::string& fixture, const model::Numerics& num, int32_t gpus = 1,
                  const std::string& dir = "") {
  SCOPED_TRACE(fixture + " " + num.name + " gpus " + std::to_string(gpus));
  runner::RunnerOptions o;
  o.model_dir = dir.empty() ? find_fixture(fixture) : dir;
  if (o.model_dir.empty()) GTEST_SKIP() << fixture << " not found under tests/fixtures";
  o.numerics = num;
  o.exact_gemm = true;
  o.gpus = gpus;
  o.communicator = "in-process";
  auto gpu = gpus > 1 ? backends::create_parallel_runner(o) : backends::create_cuda_runner(o);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  if (!dir.empty()) {
    EXPECT_FALSE((*gpu)->diagnostics().fp32_weights()) << "the converted checkpoint was not uploaded as stored";
  }
  o.backend = runner::Backend::kCpu;
  o.gpus = 1;
  auto cpu = backends::create_cpu_runner(o);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 4;
  cc.max_num_seqs = 3;
  cc.max_model_len = 64;
  auto layout = cache::compute_state_layout((*gpu)->config(), cc);
  ASSERT_TRUE(layout.is_ok()) << layout.status().message();
  const int64_t nb = layout->blocks_per_sequence(64);
  for (auto* r : {&*gpu, &*cpu}) ASSERT_TRUE((*r)->bind_state(*layout, 3, int32_t(3 * nb), 64).is_ok());
  const int64_t V = (*gpu)->config().vocab_size;
  std::vector<Seq> seqs(3);
  for (int32_t s = 0; s < 3; ++s) {
    seqs[size_t(s)].slot = 2 - s;
    for (int64_t b = 0; b < nb; ++b) seqs[size_t(s)].table.push_back(int32_t(s * nb + (nb - 1 - b)));  // out of order
    for (int64_t k = 0; k < 48; ++k) seqs[size_t(s)].toks.push_back(int32_t(3 + (s * 131 + k * 37 + k * k) % 500));
  }
  Seq &a = seqs[0], &b = seqs[1], &c = seqs[2];
  const std::vector<std::vector<std::pair<Seq*, int32_t>>> steps = {
      {{&a, 7}, {&b, 1}, {&c, 5}}, {{&a, 13}, {&b, 19}, {&c, 1}}, {{&a, 17}, {&b, 1}, {&c, 1}},
      {{&a, 1}, {&b, 1}, {&c, 1}}, {{&c, 9}, {&a, 1}}, {{&b, 1}}};
  int64_t rows = 0, argmax_same = 0, close = 0;
  double max_rel = 0;
  std::vector<float> diffs;  // every |GPU - CPU| logit difference (the max / 99th percentile are reported)
  for (size_t k = 0; k < steps.size(); ++k) {
    const scheduler::BatchPlan plan = make_plan(steps[k]);
    std::vector<float> lg, lc;
    const Status sg = (*gpu)->step(plan, lg), sc = (*cpu)->step(plan, lc);
    ASSERT_TRUE(sg.is_ok()) << "step " << k << ": " << sg.message();
    ASSERT_TRUE(sc.is_ok()) << "step " << k << ": " << sc.message();
    ASSERT_EQ(lg.size(), lc.size());
    for (int64_t r = 0; r < int64_t(lg.size()) / V; ++r) {
      const float* g = lg.data() + r * V;
      const float* h = lc.data() + r * V;
      argmax_same += std::max_element(g, g + V) - g == std::max_element(h, h + V) - h;
      ++rows;
      double err = 0, ref = 0;
      for (int64_t i = 0; i < V; ++i) {
        err = std::max(err, double(std::fabs(g[i] - h[i])));
        diffs.push_back(std::fabs(g[i] - h[i]));
        ref = std::max(ref, double(std::fabs(h[i])));
      }
      const double rel = err / std::max(ref, 1e-30);
      close += rel <= 1e-3;
      max_rel = std::max(max_rel, rel);
    }
  }
  std::sort(diffs.begin(), diffs.end());
  const double p99 = diffs.empty() ? 0.0 : double(diffs[size_t(0.99 * double(diffs.size() - 1))]);
  const double mx = diffs.empty() ? 0.0 : double(diffs.back());
  std::printf("%s%s %s (%d GPU ranks): %lld rows, argmax equal %lld, within 1e-3 %lld, max relative error %.3g, "
              "|logit diff| max %.3g p99 %.3g\n", fixture.c_str(), dir.empty() ? "" : " (official formats)",
              num.name.c_str(), gpus, (long long)rows,
              (long long)argmax_same, (long long)close, max_rel, mx, p99);
  if (num.bf16_activations) {  // official: bit-exact up to the head's fp32 GEMM (H200: max rel 9.5e-8, 79 / 79)
    EXPECT_LE(max_rel, 1e-6);
    EXPECT_EQ(argmax_same, rows);
  } else if (num.qat_sim) {
    EXPECT_GE(double(argmax_same), 0.95 * double(rows));
  } else {
    EXPECT_LE(max_rel, 1e-5);
    EXPECT_EQ(argmax_same, rows);
  }
}

}  // namespace

TEST(GpuV41Runner, ChunkedBatchedStepsMatchCpuRunner) {
  DSI_SKIP_WITHOUT_GPU();
  for (const char* fx : {"tiny-v41-a", "tiny-v41-b"}) {
    run_schedule(fx, model::Numerics::hf_noqat());
    run_schedule(fx, model::Numerics::hf());
  }
}

// Official numerics (every rounding point of model/deepseek_v41_numerics.h on the GPU, exact kernels, the CPU
// reference's arithmetic before each rounding point): the same schedule against the CPU runner's official numerics,
// on the fixtures and on their official-format conversions: every argmax equal and within 1e-6 relative (H200: 9.5e-8
// on both, the head's fp32 GEMM; session 12, before the mixes' exp was the CPU's: 75 / 79 and 0.19). On several GPUs
// the profile is refused by name.
TEST(GpuV41Runner, OfficialNumericsMatchCpuRunner) {
  DSI_SKIP_WITHOUT_GPU();
  for (const char* fx : {"tiny-v41-a", "tiny-v41-b"}) {
    run_schedule(fx, model::Numerics::official());
    const std::string src = find_fixture(fx);
    if (src.empty()) GTEST_SKIP() << fx << " not found under tests/fixtures";
    const test::ScratchDir out(std::string("official_num_") + fx);
    const Status st = model::convert_checkpoint_v41(src, out.str(), int64_t(512) << 10, 4);
    ASSERT_TRUE(st.is_ok()) << st.message();
    run_schedule(fx, model::Numerics::official(), 1, out.str());
  }
  runner::RunnerOptions o;
  o.model_dir = find_fixture("tiny-v41-a");
  o.numerics = model::Numerics::official();
  o.exact_gemm = true;
  o.gpus = 2;
  o.communicator = "in-process";
  const auto two = backends::create_parallel_runner(o);
  ASSERT_FALSE(two.is_ok());
  EXPECT_NE(two.status().message().find("'official' numerics runs on one GPU only"), std::string::npos)
      << two.status().message();
}

// Official numerics op by op: every named intermediate of the GPU forward (DSINFER_V41_DUMP) against the CPU
// reference's taps of the same prefill, for each of tiny-v41-a's prompts followed by its 16 greedy tokens (the
// sequences of official.safetensors' greedy prefills). The first op that differs names the culprit; the test
// prints the table of the 17-token prompt (4) and, per prompt, the first differing op.
TEST(GpuV41Runner, OfficialOpsMatchCpuReferenceOpByOp) {
  DSI_SKIP_WITHOUT_GPU();
  const std::string dir = find_fixture("tiny-v41-a");
  if (dir.empty()) GTEST_SKIP() << "tiny-v41-a not found under tests/fixtures";
  auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  const auto& ts = ref->tensors();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; ts.count("prompt." + std::to_string(i) + ".input_ids"); ++i) {
    std::vector<int32_t> ids;
    for (const char* part : {".input_ids", ".greedy_ids"}) {
      const io::TensorView& t = ts.at("prompt." + std::to_string(i) + part);
      for (int64_t j = 0; j < t.numel(); ++j) ids.push_back(int32_t(t.int_at(j)));
    }
    prompts.push_back(std::move(ids));
  }
  ASSERT_FALSE(prompts.empty());
  int64_t max_len = 0;
  for (const auto& p : prompts) max_len = std::max(max_len, int64_t(p.size()));

  const test::ScratchDir scratch("v41_dump");
  const char* keep = std::getenv("DSINFER_V41_DUMP");  // a caller's path keeps the dump
  const std::string path = keep && *keep ? std::string(keep) : (scratch.path / "dump.bin").string();
  std::filesystem::remove(path);
  setenv("DSINFER_V41_DUMP", path.c_str(), 1);
  runner::RunnerOptions o;
  o.model_dir = dir;
  o.numerics = model::Numerics::official();
  o.exact_gemm = true;
  auto gpu = backends::create_cuda_runner(o);
  if (!(keep && *keep)) unsetenv("DSINFER_V41_DUMP");
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = 4;
  cc.max_num_seqs = int32_t(prompts.size());
  cc.max_model_len = max_len;
  auto layout = cache::compute_state_layout((*gpu)->config(), cc);
  ASSERT_TRUE(layout.is_ok()) << layout.status().message();
  const int64_t nb = layout->blocks_per_sequence(max_len);
  ASSERT_TRUE((*gpu)->bind_state(*layout, int32_t(prompts.size()), int32_t(int64_t(prompts.size()) * nb), max_len).is_ok());
  auto cpu = model::DeepseekV41Cpu::load(dir, model::Numerics::official());
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  std::vector<test::DumpRecord> taps;
  (*cpu)->set_tap([&](std::string_view name, int64_t layer, const float* d, int64_t rows, int64_t cols) {
    taps.push_back({std::string(name), layer, rows, cols, std::vector<float>(d, d + rows * cols)});
  });
  const int64_t V = (*gpu)->config().vocab_size;
  int64_t intermediate_differ = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Seq s;
    s.slot = int32_t(i);
    for (int64_t b = 0; b < nb; ++b) s.table.push_back(int32_t(int64_t(i) * nb + b));
    s.toks = prompts[i];
    const int64_t T = int64_t(s.toks.size());
    std::vector<float> lg, lc;
    const size_t before = test::read_v41_dump(path).size();
    ASSERT_TRUE((*gpu)->step(make_plan({{&s, int32_t(T)}}), lg).is_ok());
    std::vector<test::DumpRecord> g = test::read_v41_dump(path);
    g.erase(g.begin(), g.begin() + std::ptrdiff_t(before));
    taps.clear();
    auto state = model::HostState::create((*cpu)->config(), 1, T);
    ASSERT_TRUE(state.is_ok()) << state.status().message();
    model::SoloSequence seq(**state);
    auto chunk = seq.next_chunk(s.toks, true);
    ASSERT_TRUE(chunk.is_ok()) << chunk.status().message();
    ASSERT_TRUE((*cpu)->forward((*state)->pool(), {&*chunk, 1}, lc).is_ok());
    ASSERT_EQ(lg.size(), lc.size());
    test::DumpRecord gl{"logits", -1, T, V, lg}, cl{"logits", -1, T, V, lc};
    g.push_back(gl);
    taps.push_back(cl);
    const std::vector<test::OpDiff> ds = test::compare_dumps(g, taps);
    int64_t argmax_same = 0;
    for (int64_t r = 0; r < T; ++r) {
      const float *a = lg.data() + r * V, *b = lc.data() + r * V;
      argmax_same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    }
    const auto first = std::find_if(ds.begin(), ds.end(), [](const test::OpDiff& d) { return d.differ > 0 || d.shape_mismatch; });
    std::printf("prompt %zu (%lld tokens): %zu ops compared, argmax equal %lld of %lld, logits max |diff| %.3g; first "
                "differing op: %s layer %lld (%lld of %lld values, max |diff| %.3g)\n",
                i, (long long)T, ds.size(), (long long)argmax_same, (long long)T, ds.empty() ? 0.0 : ds.back().max_abs,
                first == ds.end() ? "none" : first->name.c_str(), first == ds.end() ? -1LL : (long long)first->layer,
                first == ds.end() ? 0LL : (long long)first->differ, first == ds.end() ? 0LL : (long long)first->count,
                first == ds.end() ? 0.0 : first->max_abs);
    if (i == 4 || (i == prompts.size() - 1)) test::print_op_diffs(ds);
    EXPECT_GT(ds.size(), size_t(100)) << "the dump and the taps share too few ops";
    // H200: every intermediate bit-identical but 2 mHC pre values (one fp32 ulp, from the mixes' double sums in
    // another order; no bf16 value moved), logits within 4.8e-7 (the head's fp32 GEMM), every argmax equal. A
    // differing op moves thousands of values; the bounds below leave 8x / 4x room.
    for (const test::OpDiff& d : ds) {
      EXPECT_FALSE(d.shape_mismatch) << d.name << " layer " << d.layer;
      if (d.name != "logits") intermediate_differ += d.differ;
    }
    EXPECT_LE(ds.back().max_abs, 2e-6) << "prompt " << i << " logits";
    EXPECT_EQ(argmax_same, T) << "prompt " << i;
  }
  std::printf("intermediate values that differ, all prompts: %lld\n", (long long)intermediate_differ);
  EXPECT_LE(intermediate_differ, 16);
}

// --gpus 2 and 4 (expert parallelism, ranks sharing one GPU, fixed rank-order reduction): the same schedule within
// the same bound of the CPU runner.
TEST(GpuV41Runner, ExpertParallelRanksMatchCpuRunner) {
  DSI_SKIP_WITHOUT_GPU();
  for (int32_t gpus : {2, 4}) run_schedule("tiny-v41-a", model::Numerics::hf_noqat(), gpus);
  run_schedule("tiny-v41-b", model::Numerics::hf_noqat(), 2);
}

// Session 22, issue 27: V4.1's TP attention against EP at the same rank count, bit for bit, in the exact, fast and
// batch-invariant modes (ranks sharing this GPU). The two layouts run the same MoE (EP's expert split and
// all-reduce), so only the attention differs, and TP's share of it must be exact: a head's output does not depend on
// the others, its wq_b rows and wo_a groups run the whole weight's kernels (tp::rows_part / groups_part), and the
// gather before wo_b adds zeros. A wrong head, sink or group offset moves logits by 1e-2 or more. tiny-v41-b has 3
// output groups: 2 ranks hold 1 and 2 (one group as two halves), 4 ranks leave one rank without heads. Outside
// --batch-invariant V4.1's EP all-reduces partial sums, so neither layout is one rank's bits there
// (GpuMultiGpu.TpRanksSharingOneGpuPassCheckReferenceV41 bounds TP against the reference); under --batch-invariant
// EP gathers every pair's expert output exactly (session 23, expert_slots_cuda.cpp), so both layouts must give one
// rank's logits bit for bit too. A lost, doubled or reordered pair moves logits by 1e-3 or more.
TEST(GpuV41Runner, TpRanksMatchEpRanksBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  struct Mode {
    const char* name;
    bool exact, invariant;
  };
  for (const char* fx : {"tiny-v41-a", "tiny-v41-b"})
    for (const Mode mode : {Mode{"exact", true, false}, Mode{"fast", false, false}, Mode{"batch-invariant", false, true}})
      for (int32_t gpus : {2, 4}) {
        SCOPED_TRACE(std::string(fx) + " " + mode.name + " " + std::to_string(gpus) + " ranks");
        runner::RunnerOptions o;
        o.model_dir = find_fixture(fx);
        if (o.model_dir.empty()) GTEST_SKIP() << fx << " not found under tests/fixtures";
        o.numerics = model::Numerics::hf_noqat();
        o.exact_gemm = mode.exact;
        o.batch_invariant = mode.invariant;
        o.gpus = gpus;
        o.communicator = "in-process";
        auto ep = backends::create_parallel_runner(o);
        ASSERT_TRUE(ep.is_ok()) << ep.status().message();
        o.tensor_parallel_size = gpus;
        auto tp = backends::create_parallel_runner(o);
        ASSERT_TRUE(tp.is_ok()) << tp.status().message();
        EXPECT_NE((*tp)->name().find("TP attention"), std::string::npos) << (*tp)->name();
        // One rank, the reference of the batch-invariant mode (the other modes compare TP with EP only).
        std::unique_ptr<runner::ModelRunner> one;
        if (mode.invariant) {
          o.gpus = 1;
          o.tensor_parallel_size = 1;
          auto r = backends::create_cuda_runner(o);
          ASSERT_TRUE(r.is_ok()) << r.status().message();
          one = std::move(*r);
        }
        cache::StateCacheConfig cc;
        cc.kv_elem_bytes = 4;
        cc.max_num_seqs = 3;
        cc.max_model_len = 64;
        auto layout = cache::compute_state_layout((*ep)->config(), cc);
        ASSERT_TRUE(layout.is_ok()) << layout.status().message();
        const int64_t nb = layout->blocks_per_sequence(64);
        for (auto* r : {&*ep, &*tp}) ASSERT_TRUE((*r)->bind_state(*layout, 3, int32_t(3 * nb), 64).is_ok());
        if (one) ASSERT_TRUE(one->bind_state(*layout, 3, int32_t(3 * nb), 64).is_ok());
        std::vector<Seq> seqs(3);
        for (int32_t s = 0; s < 3; ++s) {
          seqs[size_t(s)].slot = s;
          for (int64_t b = 0; b < nb; ++b) seqs[size_t(s)].table.push_back(int32_t(s * nb + b));
          for (int64_t k = 0; k < 40; ++k) seqs[size_t(s)].toks.push_back(int32_t(5 + (s * 97 + k * 53 + k * k) % 480));
        }
        Seq &a = seqs[0], &b = seqs[1], &c = seqs[2];
        const std::vector<std::vector<std::pair<Seq*, int32_t>>> steps = {
            {{&a, 9}, {&b, 3}, {&c, 1}}, {{&a, 1}, {&b, 14}, {&c, 20}}, {{&a, 1}, {&b, 1}, {&c, 1}}, {{&c, 1}, {&a, 12}}};
        int64_t rows = 0, differ = 0, ep_vs_one = 0, tp_vs_one = 0;
        const int64_t V = (*ep)->config().vocab_size;
        auto rows_differ = [V](const std::vector<float>& x, const std::vector<float>& y) {
          int64_t n = 0;
          for (int64_t r = 0; r < int64_t(x.size()) / V; ++r)
            n += std::memcmp(x.data() + r * V, y.data() + r * V, size_t(V) * sizeof(float)) != 0;
          return n;
        };
        for (size_t k = 0; k < steps.size(); ++k) {
          const scheduler::BatchPlan plan = make_plan(steps[k]);
          std::vector<float> le, lt, l1;
          const Status se = (*ep)->step(plan, le), st = (*tp)->step(plan, lt);
          ASSERT_TRUE(se.is_ok()) << "step " << k << ": " << se.message();
          ASSERT_TRUE(st.is_ok()) << "step " << k << ": " << st.message();
          ASSERT_EQ(le.size(), lt.size());
          rows += int64_t(le.size()) / V;
          differ += rows_differ(le, lt);
          if (one) {
            const Status s1 = one->step(plan, l1);
            ASSERT_TRUE(s1.is_ok()) << "step " << k << ": " << s1.message();
            ASSERT_EQ(l1.size(), le.size());
            ep_vs_one += rows_differ(le, l1);
            tp_vs_one += rows_differ(lt, l1);
          }
        }
        std::printf("%s %s, %d ranks: TP vs EP, %lld of %lld logits rows differ", fx, mode.name, gpus,
                    (long long)differ, (long long)rows);
        if (one)
          std::printf("; EP vs one rank %lld, TP vs one rank %lld", (long long)ep_vs_one, (long long)tp_vs_one);
        std::printf("\n");
        EXPECT_GT(rows, 0);
        EXPECT_EQ(differ, 0);
        EXPECT_EQ(ep_vs_one, 0);
        EXPECT_EQ(tp_vs_one, 0);
      }
}

// The real-format load: each fixture converted into the release's storage formats (FP8 e4m3 dense projections with
// E8M0 scales per 32x32 block, FP4 e2m1 experts, FP8 Engram rows, BF16 / F32 elsewhere; model/export_v41.h, in
// shards with an index) uploads in those formats (not as fp32: checked) and gives the CPU runner's logits on the
// same checkpoint, hf-noqat within the 1e-5 bound above and identical argmax on every row, hf as above.
TEST(GpuV41Runner, OfficialStorageFormatsLoadAndMatchCpuRunner) {
  DSI_SKIP_WITHOUT_GPU();
  for (const char* fx : {"tiny-v41-a", "tiny-v41-b"}) {
    const std::string src = find_fixture(fx);
    if (src.empty()) GTEST_SKIP() << fx << " not found under tests/fixtures";
    const test::ScratchDir out(std::string("official_") + fx);
    const Status st = model::convert_checkpoint_v41(src, out.str(), int64_t(512) << 10, 4);
    ASSERT_TRUE(st.is_ok()) << st.message();
    run_schedule(fx, model::Numerics::hf_noqat(), 1, out.str());
    run_schedule(fx, model::Numerics::hf(), 1, out.str());
    run_schedule(fx, model::Numerics::hf_noqat(), 2, out.str());
  }
}

// GPU memory after the upload of a checkpoint at DeepSeek-V4.1-Flash shapes (configs/deepseek-v4.1-flash with 3
// layers: a sliding layer, an Engram layer, a CSA2 KV / index source; 16 routed experts, Engram tables of 2^20 rows;
// random values written in the official formats, ~4.5 GB) against `dsinfer plan`'s weights line for that folder:
// within 2 % (H200: +0.02 %, the weights in one arena; +1.93 % with one cudaMalloc per tensor, the allocator's
// page rounding). The fp32 vectors, Engram q * k and the expert pointer arrays are the only other differences.
TEST(GpuV41Runner, StorageFormatUploadMatchesThePlanAtFlashShapes) {
  DSI_SKIP_WITHOUT_GPU();
  const char* kConfig = "configs/deepseek-v4.1-flash/config.json";  // the checkout the tests run in, or the source tree
  std::ifstream in(std::filesystem::exists(kConfig) ? std::string(kConfig) : test::source_dir() + "/" + kConfig);
  if (!in) GTEST_SKIP() << kConfig << " not found";
  nlohmann::json c = nlohmann::json::parse(in);
  nlohmann::json& t = c.contains("text_config") ? c["text_config"] : c;
  const int64_t nextn = t.value("num_nextn_predict_layers", 0);
  std::vector<int64_t> ratios = {0, 0, 2};
  for (int64_t i = 0; i < nextn; ++i) ratios.push_back(0);
  t["num_hidden_layers"] = 3;
  t["compress_ratios"] = ratios;
  t["kv_source_layer_ids"] = {2};
  t["index_source_layer_ids"] = {2};
  t["candidate_source_layer_id"] = 2;
  t["engram_layer_ids"] = {1};
  t["engram_num_embeddings"] = {int64_t(1) << 20};
  t["n_routed_experts"] = 16;
  t["dspark_target_layer_ids"] = {0, 1, 2};
  const test::ScratchDir out("flash_official");
  std::ofstream(out.path / "config.json") << c.dump(1);
  const io::ModelConfig cfg = test::unwrap(io::load_model_config(out.str()));
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const Status st =
      model::write_checkpoint_v41(cfg, c.dump(1), model::random_fill_v41(3), out.str(), int64_t(1) << 30, threads);
  ASSERT_TRUE(st.is_ok()) << st.message();
  dsinfer::MemoryPlanOptions po;
  po.model_dir = out.str();
  po.gpus = {1};
  po.context = 4096;
  dsinfer::MemoryPlan plan;
  std::string err;
  ASSERT_TRUE(dsinfer::plan_memory(po, &plan, &err)) << err;
  const double planned = plan.rows.at(0).weight_bytes;
  // The device bytes this process's DeviceBuffers hold (cuda::device_buffer_bytes), not the device's free memory:
  // session 22's merged run saw cudaMemGetInfo move by -9.4 GiB here while the other test shards freed memory on the
  // same GPU. The device-wide figure is printed for the record.
  const int64_t before = cuda::device_buffer_bytes();
  const int64_t free_before = test::unwrap(cuda::query_device(0)).free_bytes;
  backends::DeviceWeightsV41 w;
  const backends::ExpertSlots all = backends::range_slots(cfg.num_hidden_layers, {0, int32_t(cfg.n_routed_experts)});
  const Status ls = w.load_checkpoint(cfg, out.str(), all);
  ASSERT_TRUE(ls.is_ok()) << ls.message();
  const double used = double(cuda::device_buffer_bytes() - before), gib = double(int64_t(1) << 30);
  const double device_wide = double(free_before - test::unwrap(cuda::query_device(0)).free_bytes);
  std::printf("Flash-shaped official checkpoint (3 layers, 16 experts): device buffers after load %.4f GiB "
              "(cudaMemGetInfo: %.4f), the loader's count %.4f GiB, dsinfer plan %.4f GiB: %+.2f %%\n",
              used / gib, device_wide / gib, double(w.bytes()) / gib, planned / gib, 100.0 * (used / planned - 1.0));
  EXPECT_FALSE(w.fp32_storage());
  EXPECT_LE(std::fabs(used / planned - 1.0), 0.02);
}
