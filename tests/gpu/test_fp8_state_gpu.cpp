// The CUDA runner's state in DeepSeek's storage format (issue 31), at the runner level: V4-Flash shapes with dummy
// weights (4 layers: sliding, sliding, CSA, HCA), `official` numerics, fast kernels. One runner keeps fp32 state
// (the default: the simulation path, the tensor-core attention over fp32 rows), the other DeepSeek's FP8 format
// (RunnerOptions::fp8_state: kv_elem_bytes() == cache::kFp8StateElem; compressors -> kv_encode / idx_encode, the
// indexer decoding FP8 keys, sparse_attention_fp8 over ring rows, this step's rows and compressed entries). Both run
// the same 2,200-token prompt in three chunks (1,024 + 1,024 + 152: window keys from the ring and from the step,
// the CSA indexer selecting 512 of 550 entries), then 24 teacher-forced decode steps (CUDA graphs) on the fp32
// runner's greedy tokens.
//
// Why the two should agree closely: the fast path already rounds every key to bf16 in the tensor-core kernel, and
// the FP8 format's decoded rows are exactly the simulated rows with their RoPE channels in bf16 (kv_format.h); q and
// p are bf16 in both kernels; the indexer keys decode exactly (Hadamard + FP4-simulated rows). What differs is the
// summation order (the kernels' splits and tiles). Bound: kRelBound on max|a - b| / max|a| of every logits row, and
// every greedy token equal where the fp32 row's top-2 margin exceeds twice the row's max difference.
// kRelBound = 2e-2 is provisional (the fast path's check-reference tolerance is 3e-2); the test prints the measured
// distribution (bench/NOTES.md, issue 31 second session, has the first measurement).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_layout.h"
#include "check/solo_sequence.h"
#include "cuda/gpu_test_util.h"
#include "runner/model_runner.h"
#include "tests/build_paths.h"

using namespace dsinfer;

namespace {
constexpr double kRelBound = 2e-2;  // see the header comment

runner::RunnerOptions flash_options(bool fp8_state) {
  runner::RunnerOptions o;
  o.model_dir = std::string(DSINFER_SOURCE_DIR) + "/configs/deepseek-v4-flash";
  o.backend = runner::Backend::kCuda;
  o.load_format = runner::LoadFormat::kDummy;
  o.num_layers = 4;
  o.fp8_state = fp8_state;
  return o;
}

struct RowStats {
  double rel = 0, margin = 0;
  int32_t top = -1;
};

RowStats compare_rows(const float* a, const float* b, int64_t V) {
  RowStats s;
  double diff = 0, ref = 0;
  int64_t i1 = 0;
  for (int64_t i = 0; i < V; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(a[i])));
    if (a[i] > a[i1]) i1 = i;
  }
  double second = -INFINITY;
  for (int64_t i = 0; i < V; ++i)
    if (i != i1) second = std::max(second, double(a[i]));
  s.rel = diff / std::max(ref, 1e-30);
  s.margin = (double(a[i1]) - second) / std::max(2.0 * diff, 1e-30);  // > 1: the difference cannot flip the top
  s.top = int32_t(i1);
  return s;
}

int32_t argmax(const float* x, int64_t V) { return int32_t(std::max_element(x, x + V) - x); }
}  // namespace

TEST(GpuFp8State, FlashDecodeEqualsTheFp32SimulationPath) {
  DSI_SKIP_WITHOUT_GPU();
  auto a = backends::create_cuda_runner(flash_options(false));
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  auto b = backends::create_cuda_runner(flash_options(true));
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_EQ((*a)->kv_elem_bytes(), 4);
  ASSERT_EQ((*b)->kv_elem_bytes(), cache::kFp8StateElem);
  const int64_t prompt = 2200, decode = 24, max_len = prompt + decode + 8;
  auto ca = check::bind_single_sequence_cache(**a, max_len);
  ASSERT_TRUE(ca.is_ok()) << ca.status().message();
  auto cb = check::bind_single_sequence_cache(**b, max_len);
  ASSERT_TRUE(cb.is_ok()) << cb.status().message();
  EXPECT_TRUE(cb->layout().fp8());
  EXPECT_LT(cb->layout().bytes_per_sequence(max_len) * 2, ca->layout().bytes_per_sequence(max_len));
  const int64_t V = (*a)->config().vocab_size;
  std::vector<int32_t> toks;
  for (int64_t i = 0; i < prompt; ++i) toks.push_back(int32_t((i * 7919 + 13) % (V - 1000)));
  check::SoloSequence sa(**a, *ca), sb(**b, *cb);
  std::vector<float> la, lb;
  std::vector<RowStats> rows;
  int64_t done = 0;
  int flips = 0;
  for (int64_t chunk : {int64_t(1024), int64_t(1024), prompt - 2048}) {
    const std::span<const int32_t> part(toks.data() + done, size_t(chunk));
    ASSERT_TRUE(sa.step(part, false, la).is_ok());
    ASSERT_TRUE(sb.step(part, false, lb).is_ok());
    const RowStats r = compare_rows(la.data(), lb.data(), V);
    rows.push_back(r);
    if (r.margin > 1.0 && argmax(lb.data(), V) != r.top) ++flips;
    done += chunk;
  }
  int32_t next = argmax(la.data(), V);
  for (int64_t i = 0; i < decode; ++i) {
    const int32_t tok[1] = {next};
    ASSERT_TRUE(sa.step(tok, false, la).is_ok());
    ASSERT_TRUE(sb.step(tok, false, lb).is_ok());
    const RowStats r = compare_rows(la.data(), lb.data(), V);
    rows.push_back(r);
    if (r.margin > 1.0 && argmax(lb.data(), V) != r.top) ++flips;
    next = r.top;  // teacher-forced on the fp32 path's greedy token
  }
  double worst = 0, sum = 0;
  int decided = 0;
  for (const RowStats& r : rows) {
    worst = std::max(worst, r.rel);
    sum += r.rel;
    decided += r.margin > 1.0;
  }
  // Per row (3 prefill chunks, then the decode steps): where the difference sits is the first question when the
  // bound fails (bench/NOTES.md, session 11: max 0.25, mean 1.9e-2 on the first merged-tree run).
  std::printf("[fp8 state] rel per row:");
  for (const RowStats& r : rows) std::printf(" %.2e", r.rel);
  std::printf("\n");
  std::printf("[fp8 state] %zu logits rows: max rel %.3e, mean %.3e; %d of them decided (top-2 margin > 2 x diff), "
              "%d greedy flips among those\n", rows.size(), worst, sum / double(rows.size()), decided, flips);
  EXPECT_LE(worst, kRelBound);
  EXPECT_EQ(flips, 0);
}
