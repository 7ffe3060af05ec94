// GPU parity of the stateful compressor (main and indexer, CSA and HCA, with and without the FP8 / Hadamard+FP4
// simulations) on ragged steps, against the CPU forward's token-by-token walk (compressor_step_ref + norm + RoPE +
// simulation, exactly as DeepseekV4Cpu::attention). Both sides start from the same random slot pool and a NaN
// block pool, so an entry the GPU misses or misplaces stays NaN (or is extra) and fails the comparison.
// Thresholds: pooling is double on both sides (exp may differ by an ulp) and the norm sums in double: without
// simulation every element within 2e-5 of the reference. With simulation a last-ulp difference can flip one
// FP8/FP4 rounding, so: at most 0.5 % of the entry elements off, normalised error < 2e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "attn_test_util.h"
#include "ops/compressor/compressor.h"
#include "ops/compressor/compressor_cuda.h"
#include "ops/quant_sim/quant_sim.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"

using namespace dsinfer;
using namespace dsinfer::cuda::test;
using dsinfer::cuda::DeviceBuffer;

namespace {

struct Dims {
  int64_t hd, rd, W, idx, hca_ratio, block_size;
};

// Session 37: a step of kCompressorSplitMinT tokens or more runs the split emit (three kernels) where the caller
// gives the entries scratch, else the one-kernel emit. From the same starting state both give the same bits:
// the slots and blocks of the fp32 state (gslots / gblocks: the one-kernel run's), and with an FP8 state the
// out rows and their row numbers.
void check_split_emit(TestStep& step, TestState& st, int64_t layer, ops::cuda::CompressorCudaParams p,
                      const DeviceBuffer<float>& dkv, const DeviceBuffer<float>& dgate, const std::vector<float>& slots0,
                      const std::vector<float>& blocks0, const std::vector<float>& gslots,
                      const std::vector<float>& gblocks) {
  const int64_t T = step.T;
  const std::vector<float> cpu_slots = st.slots, cpu_blocks = st.blocks;  // the CPU walk's, restored at the end
  DeviceBuffer<int32_t> entries;
  ASSERT_TRUE(entries.alloc(size_t(T + 1)).is_ok());
  auto run = [&](bool split, bool fp8, std::vector<float>& out, std::vector<int32_t>& rows) {
    st.slots = slots0;
    st.blocks = blocks0;
    st.upload();
    auto dout = to_device(std::vector<float>(size_t(T * p.d), NAN));
    auto drows = to_device(std::vector<int32_t>(size_t(T), -7));
    ops::LayerStateView view = st.device_view(layer);
    ops::cuda::CompressorCudaParams q = p;
    q.entries = split ? entries.data() : nullptr;
    if (fp8) {
      view.fp8 = true;  // entries go to out (the accessors of the entry pages are not used)
      q.out = dout.data();
      q.out_rows = drows.data();
    }
    const Status s = ops::cuda::compressor_step(step.dev, view, q, dkv.data(), dgate.data(), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    out = to_host(dout, size_t(T * p.d));
    rows = to_host(drows, size_t(T));
  };
  std::vector<float> out[2];
  std::vector<int32_t> rows[2];
  run(true, false, out[0], rows[0]);
  EXPECT_EQ(std::memcmp(to_host(st.dslots, gslots.size()).data(), gslots.data(), gslots.size() * 4), 0) << "slots";
  EXPECT_EQ(std::memcmp(to_host(st.dblocks, gblocks.size()).data(), gblocks.data(), gblocks.size() * 4), 0)
      << "entries, split emit vs one kernel";
  for (int split = 0; split < 2; ++split) run(split == 1, true, out[split], rows[split]);
  EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4), 0) << "FP8 state's out rows";
  EXPECT_EQ(rows[0], rows[1]) << "FP8 state's row numbers";
  int64_t listed = 0;
  for (int32_t r : rows[1]) listed += r >= 0;
  EXPECT_GT(listed, 2);
  EXPECT_EQ(std::count(rows[1].begin(), rows[1].end(), -7), 0) << "a token without its row number";
  st.slots = cpu_slots;
  st.blocks = cpu_blocks;
}

// The step's frontier writes: by the emit kernel (kFused: compressor_frontier_in_emit must choose it), by their own
// kernel (kApart), or either (kAny).
enum class Frontier { kAny, kFused, kApart };
struct CaseOpts {
  int64_t speculative_tokens = 0;  // the state's spare frontier rows
  int64_t min_emitted = 3;         // entries the step must complete for the case to mean something
  Frontier frontier = Frontier::kAny;
};

void run_case(const Dims& dm, std::vector<SeqSpec> seqs, int64_t layer, bool indexer, bool sim, uint32_t seed,
              const CaseOpts& o = {}) {
  SCOPED_TRACE(testing::Message() << "hd " << dm.hd << " layer " << layer << " indexer " << indexer << " sim " << sim);
  const io::ModelConfig cfg = attn_config(dm.hd, dm.rd, dm.W, dm.idx, {io::AttnType::CSA, io::AttnType::HCA},
                                          {4, dm.hca_ratio});
  TestStep step(std::move(seqs), dm.block_size);
  TestState st(cfg, 8, step.num_blocks(), dm.block_size, seed, o.speculative_tokens);
  std::fill(st.blocks.begin(), st.blocks.end(), NAN);
  st.upload();
  const std::vector<float> slots0 = st.slots, blocks0 = st.blocks;  // the state before the step
  const bool csa = layer == 0;
  const int64_t m = csa ? 4 : dm.hca_ratio, c = csa ? 2 : 1, d = indexer ? dm.idx : dm.hd, T = step.T;
  const auto kv = random_vec(size_t(T * c * d), seed + 2), gate = random_vec(size_t(T * c * d), seed + 3, 3.0f);
  const auto ape = random_vec(size_t(m * c * d), seed + 4), norm_w = random_vec(size_t(d), seed + 5);
  io::RopeParams rp;
  rp.theta = 160000.0;
  const std::vector<float> inv = ops::rope_inv_freq(rp, dm.rd);

  // CPU: the sequential walk of the forward
  const ops::LayerStateView hv = st.host_view(layer);
  std::vector<float> entry(static_cast<size_t>(d));
  int64_t emitted = 0;
  for (int64_t t = 0; t < T; ++t) {
    const size_t s = step.seq_index(t);
    const int64_t p = step.pos[size_t(t)];
    const ops::CompressorParams cp{m, csa, d, ape.data(), hv.frontier_rows};
    float* fr = indexer ? hv.index_frontier(step.slot[s]) : hv.frontier(step.slot[s]);
    if (!ops::compressor_step_ref(cp, fr, kv.data() + t * c * d, gate.data() + t * c * d, p, entry.data())) continue;
    ++emitted;
    ops::rmsnorm_ref(entry.data(), 1, d, norm_w.data(), 1e-6f, entry.data());
    ops::rope_apply_ref(entry.data(), d, dm.rd, inv, p + 1 - m, false, 1.0f);
    if (sim && !indexer) ops::fp8_block_sim_ref(entry.data(), dm.hd - dm.rd, 64);
    if (sim && indexer) {
      ops::hadamard_ref(entry.data(), d);
      ops::fp4_block_sim_ref(entry.data(), d, 32);
    }
    std::copy_n(entry.data(), d, indexer ? hv.index_key(step.table(s), p / m) : hv.entry(step.table(s), p / m));
  }
  ASSERT_GE(emitted, o.min_emitted);

  // GPU
  auto dkv = to_device(kv), dgate = to_device(gate), dape = to_device(ape), dnorm = to_device(norm_w), dinv = to_device(inv);
  ops::cuda::CompressorCudaParams p;
  p.m = m;
  p.overlap = csa;
  p.d = d;
  p.indexer = indexer;
  p.ape = dape.data();
  p.norm_w = dnorm.data();
  p.rope_dim = dm.rd;
  p.inv_freq = dinv.data();
  p.sim = !sim ? ops::cuda::CompressorSim::None
               : (indexer ? ops::cuda::CompressorSim::HadamardFp4 : ops::cuda::CompressorSim::Fp8Nope);
  p.fp8_dims = dm.hd - dm.rd;
  if (o.frontier != Frontier::kAny)
    EXPECT_EQ(ops::cuda::compressor_frontier_in_emit(T, step.dev.num_seqs, st.device_view(layer).frontier_rows, p),
              o.frontier == Frontier::kFused);
  const Status s = ops::cuda::compressor_step(step.dev, st.device_view(layer), p, dkv.data(), dgate.data(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto gslots = to_host(st.dslots, st.slots.size()), gblocks = to_host(st.dblocks, st.blocks.size());
  if (T >= ops::cuda::kCompressorSplitMinT) check_split_emit(step, st, layer, p, dkv, dgate, slots0, blocks0, gslots,
                                                              gblocks);

  // Slots (frontier rows: copies and one fp32 add) must match exactly; blocks within tolerance.
  int64_t slot_bad = 0;
  for (size_t i = 0; i < gslots.size(); ++i) slot_bad += !same(gslots[i], st.slots[i]);
  EXPECT_EQ(slot_bad, 0);
  int64_t nan_mismatch = 0, off = 0, finite = 0;
  std::vector<float> a, b;
  for (size_t i = 0; i < gblocks.size(); ++i) {
    const bool gn = std::isnan(gblocks[i]), cn = std::isnan(st.blocks[i]);
    if (gn || cn) {
      nan_mismatch += gn != cn;
      continue;
    }
    ++finite;
    off += std::fabs(gblocks[i] - st.blocks[i]) > 2e-5f;
    a.push_back(gblocks[i]);
    b.push_back(st.blocks[i]);
  }
  EXPECT_EQ(nan_mismatch, 0) << "entries written by only one side";
  EXPECT_EQ(finite, emitted * d);
  if (!sim) {
    EXPECT_EQ(off, 0);
  } else {
    EXPECT_LE(double(off), 0.005 * double(finite));
    EXPECT_LT(normalized_error(a, b), 2e-3);
  }
}

// Decode tokens, chunks crossing windows, a chunk longer than the frontier, a sequence completing no window.
const std::vector<SeqSpec> kSmallSeqs = {{0, 0, 37}, {2, 5, 1}, {1, 11, 1}, {3, 6, 19}, {4, 0, 3}, {5, 15, 2}};
const Dims kSmall{64, 16, 8, 64, 8, 16};
const std::vector<SeqSpec> kFlashSeqs = {{0, 120, 20}, {1, 4000, 1}, {2, 4093, 9}, {3, 255, 1}, {4, 1, 140}, {6, 3, 1}};
const Dims kFlash{512, 64, 128, 128, 128, 128};

}  // namespace

TEST(GpuCompressor, SmallConfigAllVariants) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t layer : {0, 1})
    for (bool indexer : {false, true})
      for (bool sim : {false, true}) {
        if (indexer && layer == 1) continue;  // HCA layers have no indexer
        run_case(kSmall, kSmallSeqs, layer, indexer, sim, 100 + uint32_t(layer * 4 + indexer * 2 + sim));
      }
}

TEST(GpuCompressor, FlashSizesAllVariants) {
  DSI_SKIP_WITHOUT_GPU();
  for (int64_t layer : {0, 1})
    for (bool indexer : {false, true})
      for (bool sim : {false, true}) {
        if (indexer && layer == 1) continue;
        run_case(kFlash, kFlashSeqs, layer, indexer, sim, 200 + uint32_t(layer * 4 + indexer * 2 + sim));
      }
}

// Session 42: decode steps and one sequence's verify step (n <= 1 + k tokens, k the state's speculative tokens) write
// the frontier rows in the emit kernel (compressor_frontier_in_emit); a two-sequence verify step keeps the frontier
// kernel, as the ragged steps above do. Frontier rows exact and entries as above either way. Positions close windows
// of every ratio (4, 16, 128): 127 and 255 close all three.
TEST(GpuCompressor, DecodeAndOneSequenceVerifyWriteTheFrontierInTheEmit) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<SeqSpec> decode = {{0, 3, 1},   {1, 7, 1},   {2, 15, 1}, {3, 0, 1},
                                       {4, 127, 1}, {5, 255, 1}, {6, 11, 1}, {7, 62, 1}};
  const std::vector<SeqSpec> verify1 = {{2, 122, 6}}, verify2 = {{2, 122, 6}, {5, 250, 6}};
  uint32_t seed = 300;
  for (const Dims& dm : {kSmall, kFlash})
    for (int64_t layer : {0, 1})
      for (bool indexer : {false, true})
        for (bool sim : {false, true}) {
          if (indexer && layer == 1) continue;
          run_case(dm, decode, layer, indexer, sim, seed++, {0, 2, Frontier::kFused});
          run_case(dm, verify1, layer, indexer, sim, seed++, {5, 1, Frontier::kFused});
          run_case(dm, verify2, layer, indexer, sim, seed++, {5, 2, Frontier::kApart});
        }
}

// A prefill-sized step (kCompressorSplitMinT tokens and more): the split emit, against the CPU walk and bitwise
// against the one-kernel emit (check_split_emit); a chunk starting mid-window, a second sequence, a decode token.
TEST(GpuCompressor, LongStepSplitEmit) {
  DSI_SKIP_WITHOUT_GPU();
  const std::vector<SeqSpec> seqs = {{0, 6, 1030}, {1, 4000, 1}, {2, 130, 300}};
  for (int64_t layer : {0, 1})
    for (bool indexer : {false, true})
      for (bool sim : {false, true}) {
        if (indexer && layer == 1) continue;
        run_case(kFlash, seqs, layer, indexer, sim, 300 + uint32_t(layer * 4 + indexer * 2 + sim));
      }
}

TEST(GpuCompressor, RejectsMismatchedLayout) {
  DSI_SKIP_WITHOUT_GPU();
  const io::ModelConfig cfg = attn_config(64, 16, 8, 64, {io::AttnType::CSA}, {4});
  TestState st(cfg, 1, 1, 16, 1);
  st.upload();
  ops::cuda::CompressorCudaParams p;
  p.m = 4;
  p.overlap = true;
  p.d = 128;  // layout has head_dim 64
  ops::StepDevice step;
  EXPECT_FALSE(ops::cuda::compressor_step(step, st.device_view(0), p, nullptr, nullptr, nullptr).is_ok());
}
