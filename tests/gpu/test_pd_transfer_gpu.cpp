// P/D disaggregation on the CUDA runner (CudaRunner::read_state / write_state; tests/unit/test_pd_transfer.cpp is the
// CPU side). Two levels:
// - Engine: a CUDA engine that imports the prefix state another CUDA engine exported continues exactly like one CUDA
//   engine that computed the whole prompt (greedy tokens equal, the imported tokens counted as one exact hit), and
//   the exported bytes are the state layout's prediction to the byte; V4 and V4.1 (the V4.1 fixture with the byte
//   tokenizer of v41_model_util.h: its own tokenizer.json is WordLevel). The engines are batch-invariant: an exact
//   prefix hit computes fewer tokens in its step than a cold prefill, and only invariance makes the CUDA kernels'
//   rows independent of that (EngineFamilies.PrefixCachingEqualsOff runs the same way; without it, the first H200
//   run of this test, 2026-12-02, saw the first token differ on tiny-v4-a: the transfer was not the cause, docs/
//   decisions.md 2026-12-03). A local hit (the prefill engine running the prompt again) is the control: it must
//   give the same tokens too.
// - Runner, DeepSeek's FP8 state format (V4-Flash shapes, 4 layers: sliding, sliding, CSA, HCA; dummy weights,
//   official numerics): the blocks and the slot snapshot of a 256-token prefix read from one runner and written into
//   another runner's fresh blocks and snapshot, restored into its slot, give the first runner's logits bit for bit on
//   the rest of the prompt and 8 decode steps; with one imported block zeroed they do not (the test can fail).
// Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cuda/runner/cuda_runner.h"
#include "cache/state_blob.h"
#include "cache/state_copy.h"
#include "cache/state_layout.h"
#include "check/solo_sequence.h"
#include "cuda/gpu_test_util.h"
#include "dsinfer/engine.h"
#include "test_util.h"
#include "v41_model_util.h"
#include "checkout_path.h"

using namespace dsinfer;
using json = nlohmann::json;

namespace {

std::unique_ptr<Engine> cuda_engine(const std::string& model, const std::string& prefix) {
  EngineOptions o;
  o.model_dir = model;
  o.backend = "cuda";
  o.numerics = "hf";
  o.batch_invariant = true;  // see the header comment
  o.max_num_seqs = 4;
  o.max_model_len = 256;
  o.enable_prefix_caching = prefix;
  o.prefix_snapshot_memory_gb = prefix == "off" ? 0 : 0.01;
  if (model.find("v41") != std::string::npos) {  // the fixture's own tokenizer is WordLevel (v41_model_util.h)
    static const test::ScratchDir dir("pd_gpu_v41_tok");
    static const std::string tok = test::byte_tokenizer(dir.path);
    o.tokenizer_path = tok;
  }
  std::string err;
  auto e = Engine::create(o, &err);
  test::require(e != nullptr, err);
  return e;
}

RequestResult run(Engine& e, const std::vector<int32_t>& prompt, int max_tokens) {
  const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
  std::string err;
  test::require(e.submit(body.dump(), &err) != 0, err);
  std::vector<RequestResult> out;
  test::require(e.run_until_idle(out, &err), err);
  test::require(out.size() == 1, "one result");
  return out[0];
}

}  // namespace

TEST(GpuPdTransfer, ImportedStateContinuesExactlyLikeOneEngine) {
  DSI_SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "tiny-v41-a"}) {
    SCOPED_TRACE(name);
    const std::string model = test::checkout_path("tests/fixtures/" + std::string(name));
    auto prefill = cuda_engine(model, "exact");
    auto decode = cuda_engine(model, "exact");
    auto single = cuda_engine(model, "off");
    const int64_t bs = prefill->stats().state_block_size;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < 3 * bs + 5; ++i) prompt.push_back(int32_t(2 + (i * 37 + i * i) % 200));
    run(*prefill, prompt, 1);
    std::string blob, err;
    ASSERT_TRUE(prefill->export_prefix_state(prompt, &blob, &err)) << err;
    const EngineStats st = prefill->stats();
    EXPECT_EQ(int64_t(blob.size()),
              cache::state_blob_bytes({0, bs, st.state_block_bytes, st.state_slot_bytes, 3 * bs}));
    ASSERT_EQ(decode->import_prefix_state(blob, &err), 3 * bs) << err;
    const RequestResult d = run(*decode, prompt, 12), s = run(*single, prompt, 12);
    const RequestResult local = run(*prefill, prompt, 12);  // the control: a hit on the engine's own state
    EXPECT_EQ(local.completions.at(0).token_ids, s.completions.at(0).token_ids) << "a local exact hit differs";
    EXPECT_EQ(d.completions.at(0).token_ids, s.completions.at(0).token_ids);
    EXPECT_EQ(decode->stats().prefix_cache.exact_hits, 1);
    EXPECT_EQ(decode->stats().prefix_cache.hit_tokens, 3 * bs);
  }
}

namespace {

// One step of the sequence in `slot` from position `pos` (the rows of every token when `all`), on a hand-built plan
// as check::SoloSequence builds it (which always starts at position 0).
Status step_at(runner::ModelRunner& r, cache::StateCache& c, cache::SlotId slot, int64_t pos,
               std::span<const int32_t> tokens, std::vector<float>& logits) {
  const int64_t end = pos + int64_t(tokens.size());
  if (!c.allocate_for(slot, end)) return Status::errorf("state cache cannot hold {} tokens", end);
  scheduler::BatchPlan p;
  p.clear();
  scheduler::SeqPlan sp;
  sp.seq_id = 1;
  sp.start_pos = pos;
  sp.num_new_tokens = int32_t(tokens.size());
  sp.needs_logits = true;
  sp.logits_row = 0;
  sp.slot = slot;
  sp.block_table = c.table(slot);
  p.token_ids.assign(tokens.begin(), tokens.end());
  for (int64_t i = 0; i < int64_t(tokens.size()); ++i) {
    p.positions.push_back(pos + i);
    p.logits_token_index.push_back(int32_t(i));
  }
  p.cu_seqlens.push_back(int32_t(tokens.size()));
  p.seqs.push_back(sp);
  return r.step(p, logits);
}

std::vector<cache::StateRegion> prefix_regions(cache::StateCache& c, cache::SlotId slot, int64_t blocks) {
  std::vector<cache::StateRegion> out;
  const auto table = c.table(slot);
  for (int64_t i = 0; i < blocks; ++i) out.push_back({cache::StateRegion::Kind::kBlock, table[size_t(i)]});
  out.push_back({cache::StateRegion::Kind::kSnapshot, 0});
  return out;
}

}  // namespace

TEST(GpuPdTransfer, Fp8StateRoundTripsThroughReadAndWriteBitForBit) {
  DSI_SKIP_WITHOUT_GPU();
  runner::RunnerOptions o;
  o.model_dir = test::checkout_path("configs/deepseek-v4-flash");
  o.backend = runner::Backend::kCuda;
  o.load_format = runner::LoadFormat::kDummy;
  o.num_layers = 4;
  o.fp8_state = true;
  o.batch_invariant = true;
  auto a = backends::create_cuda_runner(o);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  auto b = backends::create_cuda_runner(o);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_EQ((*a)->kv_elem_bytes(), cache::kFp8StateElem);
  const int64_t max_len = 512;
  auto ca = check::bind_single_sequence_cache(**a, max_len);
  ASSERT_TRUE(ca.is_ok()) << ca.status().message();
  auto cb = check::bind_single_sequence_cache(**b, max_len);
  ASSERT_TRUE(cb.is_ok()) << cb.status().message();
  ASSERT_TRUE(ca->layout().fp8());
  ASSERT_TRUE((*a)->bind_snapshots(1).is_ok());
  ASSERT_TRUE((*b)->bind_snapshots(1).is_ok());
  const int64_t bs = ca->block_size(), P = 2 * bs, tail = 37, decode = 8;
  const int64_t V = (*a)->config().vocab_size;
  std::vector<int32_t> toks;
  for (int64_t i = 0; i < P + tail; ++i) toks.push_back(int32_t((i * 7919 + 13) % (V - 1000)));

  // Runner A computes the prefix in two chunks, snapshots its slot and exports blocks + snapshot.
  const cache::SlotId sa = ca->admit(P + tail + decode);
  ASSERT_GE(sa, 0);
  std::vector<float> la;
  ASSERT_TRUE(step_at(**a, *ca, sa, 0, std::span(toks).first(size_t(bs)), la).is_ok());
  ASSERT_TRUE(step_at(**a, *ca, sa, bs, std::span(toks).subspan(size_t(bs), size_t(bs)), la).is_ok());
  const cache::StateCopy save{cache::StateCopy::Kind::kSlotToSnapshot, sa, 0};
  ASSERT_TRUE((*a)->copy_state({&save, 1}).is_ok());
  const auto regions_a = prefix_regions(*ca, sa, P / bs);
  std::vector<uint8_t> blob(size_t(P / bs * ca->layout().block_bytes + ca->layout().slot_bytes));
  const Status rs = (*a)->read_state(regions_a, blob);
  ASSERT_TRUE(rs.is_ok()) << rs.message();

  // A continues: the rest of the prompt, then greedy decode steps (the reference rows).
  std::vector<std::vector<float>> ref;
  std::vector<int32_t> cont(toks.begin() + P, toks.end());
  ASSERT_TRUE(step_at(**a, *ca, sa, P, cont, la).is_ok());
  ref.push_back(la);
  for (int64_t k = 0; k < decode; ++k) {
    const std::vector<float> last(la.end() - V, la.end());
    const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    cont.push_back(next);
    ASSERT_TRUE(step_at(**a, *ca, sa, P + tail + k, std::span(&cont.back(), 1), la).is_ok());
    ref.push_back(la);
  }

  // Runner B imports into fresh blocks and its snapshot, restores the slot and runs the same steps.
  auto replay = [&](const std::vector<uint8_t>& bytes) {
    std::vector<std::vector<float>> rows;
    const cache::SlotId s = cb->admit(P + tail + decode);
    test::require(s >= 0 && cb->allocate_for(s, P), "runner B admits the sequence");
    const Status ws = (*b)->write_state(prefix_regions(*cb, s, P / bs), bytes);
    test::require(ws.is_ok(), ws.message());
    const cache::StateCopy restore{cache::StateCopy::Kind::kSnapshotToSlot, 0, s};
    test::require((*b)->copy_state({&restore, 1}).is_ok(), "restore");
    std::vector<float> lb;
    test::require(step_at(**b, *cb, s, P, std::span(cont).first(size_t(tail)), lb).is_ok(), "tail step");
    rows.push_back(lb);
    for (int64_t k = 0; k < decode; ++k) {
      test::require(step_at(**b, *cb, s, P + tail + k, std::span(cont).subspan(size_t(tail + k), 1), lb).is_ok(),
                    "decode step");
      rows.push_back(lb);
    }
    cb->free(s);
    return rows;
  };
  const std::vector<std::vector<float>> got = replay(blob);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(got[i] == ref[i]) << "row set " << i << " differs";
  std::vector<uint8_t> broken = blob;
  std::memset(broken.data(), 0, size_t(ca->layout().block_bytes));  // block 0: its compressed entries and keys
  EXPECT_FALSE(replay(broken)[0] == ref[0]) << "a zeroed block did not change the logits";
}
