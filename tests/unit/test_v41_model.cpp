// The DeepSeek-V4.1 CPU reference: the incremental-state contract (any chunking followed by decoding, and any
// mixed batch, give the logits of one full forward, bit for bit) under all three numerics, the transformers
// reference without QAT to 1e-5, and layer-by-layer agreement with the fixture's debug tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "api/request.h"
#include "backends/cpu/cpu_model.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "model/deepseek_v41.h"
#include "model/host_state.h"
#include "test_util.h"
#include "v41_tokenizer_util.h"

using namespace dsinfer;
using namespace dsinfer::model;

namespace {

std::unique_ptr<DeepseekV41Cpu> load(const std::string& dir, const Numerics& num) {
  auto m = DeepseekV41Cpu::load(dir, num);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

Status step(DeepseekV41Cpu& m, HostState& st, SoloSequence& seq, std::span<const int32_t> toks, bool all,
            std::vector<float>& out) {
  DSI_ASSIGN_OR_RETURN(SeqChunk c, seq.next_chunk(toks, all));
  DSI_RETURN_IF_ERROR(m.forward(st.pool(), {&c, 1}, out));
  seq.advance(int64_t(toks.size()));
  return Status::ok();
}

// Logits of every position, produced by feeding `toks` in chunks of the given sizes (cycled).
std::vector<float> run_chunked(DeepseekV41Cpu& m, const std::vector<int32_t>& toks, const std::vector<int>& sizes) {
  auto state = HostState::create(m.config(), 1, int64_t(toks.size()));
  EXPECT_TRUE(state.is_ok()) << state.status().message();
  SoloSequence seq(**state);
  std::vector<float> all, part;
  size_t i = 0, k = 0;
  while (i < toks.size()) {
    const size_t n = std::min(toks.size() - i, size_t(sizes[k++ % sizes.size()]));
    const Status st = step(m, **state, seq, {toks.data() + i, n}, true, part);
    EXPECT_TRUE(st.is_ok()) << st.message();
    all.insert(all.end(), part.begin(), part.end());
    i += n;
  }
  return all;
}

struct Case {
  const char* fixture;
  Numerics num;
};
std::vector<Case> cases() {
  return {{"tiny-v41-a", Numerics::hf()}, {"tiny-v41-b", Numerics::hf()}, {"tiny-v41-a", Numerics::hf_noqat()},
          {"tiny-v41-a", Numerics::official()}, {"tiny-v41-b", Numerics::official()}};
}

class V41Incremental : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(V41Incremental, ChunkedPrefillAndDecodeEqualFullForward) {
  const Case c = cases()[size_t(GetParam())];
  auto m = load(test::own_fixture(c.fixture), c.num);
  ASSERT_TRUE(m);
  // 75 tokens: past the sliding windows (16 / 32), many ratio-2 groups, several candidate blocks.
  const auto toks = random_tokens(75, int(m->config().vocab_size), 3);
  const auto full = run_chunked(*m, toks, {75});
  for (const std::vector<int>& split : std::vector<std::vector<int>>{{1}, {3, 5}, {2}, {7, 1, 13}, {16, 2}, {40, 1}}) {
    const auto got = run_chunked(*m, toks, split);
    ASSERT_EQ(got.size(), full.size());
    EXPECT_EQ(got, full) << "split starting " << split[0];
  }
}

TEST_P(V41Incremental, MixedBatchEqualsEachSequenceAlone) {
  const Case c = cases()[size_t(GetParam())];
  auto m = load(test::own_fixture(c.fixture), c.num);
  ASSERT_TRUE(m);
  const int V = int(m->config().vocab_size);
  std::vector<std::vector<int32_t>> prompts = {random_tokens(37, V, 10), random_tokens(9, V, 11), random_tokens(20, V, 12),
                                               random_tokens(1, V, 13)};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(run_chunked(*m, p, {int(p.size())}));
  // Sequence 1 is prefilled in an earlier step and decodes inside the mixed step; slots are scrambled.
  auto state = HostState::create(m->config(), 6, 40);
  ASSERT_TRUE(state.is_ok()) << state.status().message();
  SoloSequence filler(**state), s1(**state), s3(**state), s0(**state), s2(**state);
  std::vector<float> pre;
  const int32_t one = 7;
  ASSERT_TRUE(step(*m, **state, filler, {&one, 1}, false, pre).is_ok());
  ASSERT_TRUE(step(*m, **state, s1, {prompts[1].data(), 8}, true, pre).is_ok());
  std::vector<SeqChunk> chunks;
  for (auto [seq, toks, all] : {std::tuple{&s0, std::span<const int32_t>(prompts[0]), true},
                                std::tuple{&s1, std::span<const int32_t>(prompts[1].data() + 8, 1), true},
                                std::tuple{&s2, std::span<const int32_t>(prompts[2]), false},
                                std::tuple{&s3, std::span<const int32_t>(prompts[3]), true}}) {
    auto ch = seq->next_chunk(toks, all);
    ASSERT_TRUE(ch.is_ok()) << ch.status().message();
    chunks.push_back(*ch);
  }
  std::vector<float> out;
  ASSERT_TRUE(m->forward((*state)->pool(), chunks, out).is_ok());
  const size_t Vs = size_t(V);
  size_t row = 0;
  auto expect_rows = [&](size_t seq, size_t first_pos, size_t count) {
    for (size_t r = 0; r < count; ++r, ++row) {
      std::vector<float> a(out.begin() + long(row * Vs), out.begin() + long((row + 1) * Vs));
      std::vector<float> b(alone[seq].begin() + long((first_pos + r) * Vs), alone[seq].begin() + long((first_pos + r + 1) * Vs));
      EXPECT_EQ(a, b) << "sequence " << seq << " position " << first_pos + r;
    }
  };
  expect_rows(0, 0, 37);
  expect_rows(1, 8, 1);
  expect_rows(2, 19, 1);
  expect_rows(3, 0, 1);
  EXPECT_EQ(row * Vs, out.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V41Incremental, ::testing::Range(0, 5));

// Streams after every layer, the carried pre, Engram output and final hidden of the fixture's debug prompt,
// against transformers (QAT on): the first layer that drifts names the culprit.
TEST(V41Forward, MatchesTransformersLayerByLayer) {
  const std::string dir = test::own_fixture("tiny-v41-a");
  auto m = load(dir, Numerics::hf());
  ASSERT_TRUE(m);
  auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  const auto& ts = ref->tensors();
  const io::TensorView& ids_t = ts.at("prompt.5.input_ids");
  std::vector<int32_t> ids(size_t(ids_t.numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(ids_t.int_at(int64_t(i)));
  std::map<std::string, std::vector<float>> taps;
  m->set_tap([&](std::string_view name, int64_t layer, const float* d, int64_t rows, int64_t cols) {
    taps[layer < 0 ? std::string(name) : "layer." + std::to_string(layer) + "." + std::string(name)].assign(d, d + rows * cols);
  });
  (void)run_chunked(*m, ids, {int(ids.size())});
  auto check = [&](const std::string& ours, const std::string& theirs, double tol) {
    ASSERT_TRUE(taps.count(ours)) << ours;
    const io::TensorView& t = ts.at(theirs);
    const float* r = reinterpret_cast<const float*>(t.data);
    ASSERT_EQ(int64_t(taps[ours].size()), t.numel()) << ours;
    double err = 0, mx = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      err = std::max(err, double(std::fabs(taps[ours][size_t(i)] - r[i])));
      mx = std::max(mx, double(std::fabs(r[i])));
    }
    EXPECT_LE(err, tol * mx) << ours << ": max |err| " << err << " of max |ref| " << mx;
  };
  for (int l = 0; l < 10; ++l) {
    const std::string p = "layer." + std::to_string(l) + ".";
    if (ts.count("debug." + p + "engram_streams_out")) check(p + "engram_streams_out", "debug." + p + "engram_streams_out", 1e-5);
    check(p + "streams_out", "debug." + p + "streams_out", 1e-5);
    check(p + "pre_out", "debug." + p + "pre_out", 1e-5);
  }
  check("final_hidden", "debug.final_hidden", 1e-5);
}

TEST(V41Forward, RunsBehindTheCpuModelInterface) {
  auto m = backends::load_cpu_model(test::own_fixture("tiny-v41-b"), Numerics::hf());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_TRUE((*m)->config().is_v41());
  EXPECT_TRUE((*m)->fp32_weights());
  auto v4 = backends::load_cpu_model(test::own_fixture("tiny-v4-a"), Numerics::hf());
  ASSERT_TRUE(v4.is_ok()) << v4.status().message();
  EXPECT_FALSE((*v4)->config().is_v41());
}

// The engine end to end on a V4.1 model: chunked prefill mixed with decode, and preemption under a tiny state
// budget, give each request the tokens it gets alone. (The fixture's tokenizer.json is a WordLevel model, which
// only the Engram vocabulary reads; the engine's detokenizer gets a byte-level BPE one.)
namespace {
EngineOptions engine_options(int32_t max_seqs, int64_t budget_tokens, double state_gb = 0) {
  static const test::ScratchDir dir("v41_engine_tok");
  static const std::string tok = test::byte_tokenizer(dir);
  EngineOptions c;
  c.model_dir = test::own_fixture("tiny-v41-b");
  c.tokenizer_path = tok;
  c.numerics = "hf";
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget_tokens;
  c.max_model_len = 80;
  c.seed = 7;
  c.state_memory_gb = state_gb;
  return c;
}

std::vector<std::vector<int32_t>> run_engine(const EngineOptions& o, const std::vector<nlohmann::json>& bodies,
                                             int64_t* preemptions = nullptr) {
  auto e = engine::Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return {};
  std::map<scheduler::RequestId, size_t> idx;
  for (size_t i = 0; i < bodies.size(); ++i) {
    Request r;
    EXPECT_TRUE(api::parse_request_body(nlohmann::ordered_json::parse(bodies[i].dump()), std::nullopt, r).is_ok());
    auto id = (*e)->add(r);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    idx[*id] = i;
  }
  std::vector<std::vector<int32_t>> out(bodies.size());
  for (int guard = 0; (*e)->has_unfinished() && guard < 10000; ++guard) {
    const Status s = (*e)->step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    for (auto& r : (*e)->take_finished()) out[idx[r.id]] = r.choices.at(0).token_ids;
  }
  if (preemptions) *preemptions = (*e)->stats().num_preemptions;
  return out;
}
}  // namespace

TEST(V41Engine, ChunkedBatchedAndPreemptedRequestsMatchAlone) {
  std::vector<nlohmann::json> bodies;
  for (int i = 0; i < 8; ++i) {
    nlohmann::json prompt = nlohmann::json::array();
    for (int k = 0; k < 1 + (i * 11) % 45; ++k) prompt.push_back(3 + (i * 37 + k * 13) % 500);
    bodies.push_back({{"prompt", prompt}, {"max_tokens", 4 + i % 6}, {"temperature", 0.0}, {"ignore_eos", true}});
  }
  const auto together = run_engine(engine_options(8, 16), bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    const auto alone = run_engine(engine_options(2, 4096), {bodies[i]});
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(together[i], alone[0]) << "request " << i;
    EXPECT_EQ(together[i].size(), size_t(bodies[i]["max_tokens"].get<int>()));
  }
  auto probe = model::DeepseekV41Cpu::load(test::own_fixture("tiny-v41-b"), Numerics::hf());
  ASSERT_TRUE(probe.is_ok());
  cache::StateCacheConfig cc;
  cc.max_num_seqs = 8;
  cc.max_model_len = 80;
  auto layout = cache::compute_state_layout((*probe)->config(), cc);
  ASSERT_TRUE(layout.is_ok());
  int64_t preemptions = 0;
  const auto tight = run_engine(engine_options(8, 64, double(2 * layout->bytes_per_sequence(80)) / double(int64_t(1) << 30)),
                                bodies, &preemptions);
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(tight, together);
}
