// Issue 27, session 16: CUDA graphs of decode steps with several ranks sharing one GPU through the in-process
// communicator (docs/multi_gpu.md "CUDA graphs at N > 1"; backends/cuda/parallel/group_graphs.h). The ParallelRunner
// is driven step by step as the engine drives it: a ragged prefill of S sequences, decode steps of S, then of S - 2
// (two graph shapes: each runs eagerly once, is captured on its second step and replayed after). Against the same
// run with DSINFER_CUDA_GRAPHS=0 (every step eager, the collectives on the device all the same), every logits row
// of every step must be bit-identical, EP and TP, 2 and 4 ranks, with and without --batch-invariant; under
// --batch-invariant also against one rank (which pads its decode steps to a graph bucket: bit-neutral there). The
// graphs are counted, so a run that silently stayed eager fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/state_layout.h"
#include "cuda/gpu_test_util.h"
#include "engine/runner_factory.h"
#include "runner/model_runner.h"
#include "scheduler/batch_plan.h"
#include "tests/build_paths.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

constexpr int32_t kSlots = 8;
constexpr int32_t kSeqs = 5;
constexpr int64_t kMaxLen = 256;

struct Setup {
  int32_t ranks = 1;
  bool tp = false;
  bool dp = false;
  bool invariant = true;
  bool graphs = true;
};

struct RunResult {
  std::vector<float> logits;  // every logits row of every step, in order
  int64_t graphs = 0;
  std::string name;
};

Result<RunResult> run(const std::string& model, const Setup& s) {
  runner::RunnerOptions o;
  o.model_dir = model;
  o.backend = runner::Backend::kCuda;
  o.numerics = model::Numerics::hf();
  o.batch_invariant = s.invariant;
  o.gpus = s.ranks;
  o.tensor_parallel_size = s.tp ? s.ranks : 1;
  o.data_parallel_size = s.dp ? s.ranks : 1;
  o.communicator = s.ranks > 1 ? "in-process" : "auto";
  if (!s.graphs) setenv("DSINFER_CUDA_GRAPHS", "0", 1);
  setenv("DSINFER_GROUP_GRAPHS", "1", 1);
  auto created = engine::create_runner(o);
  unsetenv("DSINFER_CUDA_GRAPHS");
  unsetenv("DSINFER_GROUP_GRAPHS");
  if (!created) return created.status();
  runner::ModelRunner& r = **created;
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = r.kv_elem_bytes();
  cc.max_num_seqs = kSlots;
  cc.max_model_len = kMaxLen;
  DSI_ASSIGN_OR_RETURN(const cache::StateLayout layout, cache::compute_state_layout(r.config(), cc));
  const int64_t nb = layout.blocks_per_sequence(kMaxLen);
  DSI_RETURN_IF_ERROR(r.bind_state(layout, kSlots, int32_t(kSlots * nb), kMaxLen));
  const int64_t V = r.config().vocab_size;
  std::vector<int64_t> done(size_t(kSeqs), 0);
  std::vector<std::vector<cache::BlockId>> tables(static_cast<size_t>(kSeqs));  // sequence q: the blocks of slot kSlots - 1 - q
  for (int32_t q = 0; q < kSeqs; ++q)
    for (int64_t b = 0; b < nb; ++b) tables[size_t(q)].push_back(cache::BlockId((kSlots - 1 - q) * nb + b));
  auto token = [&](int32_t q, int64_t pos) { return int32_t((pos * 131 + q * 17 + 5) % V); };
  RunResult out;
  out.name = r.name();
  std::vector<float> logits;
  auto step = [&](int32_t seqs, bool prefill) -> Status {
    scheduler::BatchPlan p;
    p.clear();
    for (int32_t q = 0; q < seqs; ++q) {
      const int32_t n = prefill ? 7 + 5 * q : 1;
      scheduler::SeqPlan sp;
      sp.start_pos = done[size_t(q)];
      sp.num_new_tokens = n;
      sp.token_offset = p.num_tokens();
      sp.is_prefill = prefill;
      sp.needs_logits = true;
      sp.logits_row = p.num_logits();
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
  DSI_RETURN_IF_ERROR(step(kSeqs, true));
  for (int32_t d = 0; d < 5; ++d) DSI_RETURN_IF_ERROR(step(kSeqs, false));
  for (int32_t d = 0; d < 4; ++d) DSI_RETURN_IF_ERROR(step(kSeqs - 2, false));
  out.graphs = r.diagnostics().graphs_captured();
  return out;
}

// Flat index of the first logit whose bits differ (a.size() if none); every logit of `a` must be finite.
size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t finite = 0;
  for (float x : a) finite += std::isfinite(x) ? 1 : 0;
  EXPECT_EQ(finite, a.size()) << "logits not all finite: nothing to compare";
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return i;
  return a.size() == b.size() ? a.size() : std::min(a.size(), b.size());
}

std::string find_model(const std::string& name) {
  for (const std::string& d : {"tests/fixtures/" + name, "models/" + name, test::own_fixture(name),
                               std::string(DSINFER_SOURCE_DIR) + "/models/" + name})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

}  // namespace

TEST(GpuGroupGraphs, RanksSharingOneGpuGraphEqualsEagerAndOneRankBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  int checked = 0;
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "dsv4-small"}) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    for (const bool inv : {true, false}) {
      auto one = run(model, {.invariant = inv});
      ASSERT_TRUE(one.is_ok()) << name << ": " << one.status().message();
      for (const bool tp : {false, true})
        for (const int32_t n : {2, 4}) {
          const std::string label = std::string(name) + ", " + std::to_string(n) + (tp ? " TP" : " EP") + " ranks" +
                                    (inv ? ", batch-invariant" : "");
          SCOPED_TRACE(label);
          auto graph = run(model, {.ranks = n, .tp = tp, .invariant = inv});
          ASSERT_TRUE(graph.is_ok()) << graph.status().message();
          auto eager = run(model, {.ranks = n, .tp = tp, .invariant = inv, .graphs = false});
          ASSERT_TRUE(eager.is_ok()) << eager.status().message();
          EXPECT_EQ(graph->graphs, 2) << "decode at " << kSeqs << " and " << kSeqs - 2 << " sequences: " << graph->name;
          EXPECT_EQ(eager->graphs, 0);
          const size_t d = first_difference(eager->logits, graph->logits);
          EXPECT_EQ(d, eager->logits.size()) << "graph vs eager: first differing logit at " << d;
          size_t d1 = 0;
          if (inv) {
            d1 = first_difference(one->logits, graph->logits);
            EXPECT_EQ(d1, one->logits.size()) << "graph vs one rank: first differing logit at " << d1;
          }
          std::printf("%s: %zu logits, graphs %lld, graph == eager %s%s\n", label.c_str(), graph->logits.size(),
                      (long long)graph->graphs, d == eager->logits.size() ? "bit for bit" : "DIFFERS",
                      inv ? (d1 == one->logits.size() ? ", == one rank bit for bit" : ", one rank DIFFERS") : "");
          ++checked;
        }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no fixture found";
}

// Session 19: DP attention's decode steps as one graph of the group (its exchange at a fixed capacity, the
// all-to-all on the device: docs/multi_gpu.md "CUDA graphs and asynchronous steps at N > 1"). The sequences sit on
// slots 7..3 of 8, so at 2 ranks rank 0 has one sequence and then none (its graphed part only serves its experts),
// at 4 ranks rank 0 has none throughout; every rank's stream is in the one capture either way. Graph == eager bit for
// bit, and under --batch-invariant == one rank.
TEST(GpuGroupGraphs, DpRanksSharingOneGpuGraphEqualsEagerAndOneRankBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  int checked = 0;
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "dsv4-small"}) {
    const std::string model = find_model(name);
    if (model.empty()) continue;
    for (const bool inv : {true, false}) {
      auto one = run(model, {.invariant = inv});
      ASSERT_TRUE(one.is_ok()) << name << ": " << one.status().message();
      for (const int32_t n : {2, 4}) {
        const std::string label = std::string(name) + ", " + std::to_string(n) + " DP ranks" +
                                  (inv ? ", batch-invariant" : "");
        SCOPED_TRACE(label);
        auto graph = run(model, {.ranks = n, .dp = true, .invariant = inv});
        ASSERT_TRUE(graph.is_ok()) << graph.status().message();
        auto eager = run(model, {.ranks = n, .dp = true, .invariant = inv, .graphs = false});
        ASSERT_TRUE(eager.is_ok()) << eager.status().message();
        EXPECT_EQ(graph->graphs, 2) << "decode at " << kSeqs << " and " << kSeqs - 2 << " sequences: " << graph->name;
        EXPECT_EQ(eager->graphs, 0);
        const size_t d = first_difference(eager->logits, graph->logits);
        EXPECT_EQ(d, eager->logits.size()) << "graph vs eager: first differing logit at " << d;
        size_t d1 = 0;
        if (inv) {
          d1 = first_difference(one->logits, graph->logits);
          EXPECT_EQ(d1, one->logits.size()) << "graph vs one rank: first differing logit at " << d1;
        }
        std::printf("%s: %zu logits, graphs %lld, graph == eager %s%s\n", label.c_str(), graph->logits.size(),
                    (long long)graph->graphs, d == eager->logits.size() ? "bit for bit" : "DIFFERS",
                    inv ? (d1 == one->logits.size() ? ", == one rank bit for bit" : ", one rank DIFFERS") : "");
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no fixture found";
}
