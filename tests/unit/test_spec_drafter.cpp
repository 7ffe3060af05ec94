// The C++ drafters (src/speculative: DSpark and MTP-1, CPU reference) against PyTorch: tests/fixtures/
// dspark-reference.safetensors holds, for three (prompt, anchor) cases of the shipped model, the DSpark block's
// draft logits and confidence logits (drafts chosen by argmax) and MTP-1's logits, computed by
// tools/train/dump_drafter_reference.py (transformers + tools/train/arch.py, fp32 CPU, the exported weights).
// The C++ side computes the target hidden states with its own forward (hf numerics), so the tolerance covers
// both forwards. Also: loader errors name the tensor / file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/host_state.h"
#include "speculative/draft_weights.h"
#include "speculative/drafter.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

std::string model_dir() { return test::source_dir() + "/models/dsv4-small"; }
// The speculative settings of `method` with every other option at its default (drafts per step: the maximum).
speculative::SpeculativeConfig spec_config(speculative::SpecMethod method) {
  return test::unwrap(speculative::resolve_speculative_config(speculative::spec_method_name(method), 0, 0, 0, "off",
                                                              model_dir()));
}

std::vector<float> f32(const io::TensorView* t) {
  std::vector<float> v(size_t(t->numel()));
  std::memcpy(v.data(), t->data, v.size() * 4);
  return v;
}

// Target output residual streams of `layers` for positions [0, ids.size()): [T, layers, hc * D].
std::vector<float> target_hidden(model::DeepseekV4Cpu& m, const std::vector<int32_t>& ids,
                                 const std::vector<int64_t>& layers) {
  const int64_t W = m.config().hc_mult * m.config().hidden_size, T = int64_t(ids.size());
  std::vector<float> hidden(size_t(T) * layers.size() * size_t(W));
  m.set_tap([&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
    if (name != "residual") return;
    for (size_t i = 0; i < layers.size(); ++i)
      if (layers[i] == layer)
        for (int64_t t = 0; t < rows; ++t)
          std::memcpy(hidden.data() + (size_t(t) * layers.size() + i) * size_t(W), data + t * cols, size_t(cols) * 4);
  });
  auto st = model::HostState::create(m.config(), 1, 256);
  EXPECT_TRUE(st.is_ok());
  model::SoloSequence seq(**st);
  std::vector<float> logits;
  EXPECT_TRUE(seq.step(m, ids, false, logits).is_ok());
  m.set_tap(nullptr);
  return hidden;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b, double* scale) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    s = std::max(s, std::fabs(double(b[i])));
  }
  *scale = s;
  return d;
}

}  // namespace

TEST(SpecDrafter, DsparkAndMtp1MatchPyTorch) {
  auto ref = io::Checkpoint::open(test::source_dir() + "/tests/fixtures/dspark-reference.safetensors");
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  auto m = model::DeepseekV4Cpu::load(model_dir(), model::Numerics::hf());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  const io::ModelConfig& cfg = (*m)->config();
  const int64_t V = cfg.vocab_size;
  auto ds = speculative::create_cpu_drafter(spec_config(speculative::SpecMethod::kDspark), cfg, 2);
  ASSERT_TRUE(ds.is_ok()) << ds.status().message();
  auto mtp = speculative::create_cpu_drafter(spec_config(speculative::SpecMethod::kMtp1), cfg, 2);
  ASSERT_TRUE(mtp.is_ok()) << mtp.status().message();
  int cases = 0;
  for (int c = 0;; ++c) {
    const io::TensorView* ids_t = ref->find(fmt::format("case.{}.input_ids", c));
    if (!ids_t) break;
    ++cases;
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < ids_t->numel(); ++i) ids.push_back(int32_t(ids_t->int_at(i)));
    const int64_t a = int64_t(ids.size()) - 1;  // anchor position; context = positions < a
    const std::vector<int32_t> ctx(ids.begin(), ids.end() - 1);
    const std::vector<float> hidden = target_hidden(**m, ctx, (*ds)->tapped_layers());

    // DSpark: ingest the context (in two pieces: chunking must not matter), draft the reference's tokens.
    const int32_t slot = c % 2;
    const int32_t half = int32_t(a / 2);
    std::vector<speculative::IngestItem> ing{{slot, 0, half, 0, {}}, {slot, half, int32_t(a) - half, half, {}}};
    ASSERT_TRUE((*ds)->ingest(ing, hidden).is_ok());
    const io::TensorView* tk = ref->find(fmt::format("case.{}.dspark_tokens", c));
    const std::vector<float> want = f32(ref->find(fmt::format("case.{}.dspark_logits", c)));
    const std::vector<float> want_conf = f32(ref->find(fmt::format("case.{}.dspark_conf", c)));
    const int32_t g = int32_t(tk->numel());
    std::vector<float> got(size_t(g) * size_t(V));
    auto draw = [&](size_t, int32_t k, std::span<const float> lg) {
      std::copy(lg.begin(), lg.end(), got.begin() + int64_t(k) * V);
      return int32_t(tk->int_at(k));
    };
    std::vector<speculative::Proposal> props;
    const speculative::ProposeItem item{slot, a, ids[size_t(a)], g};
    ASSERT_TRUE((*ds)->propose({&item, 1}, draw, props).is_ok());
    for (int32_t k = 0; k < g; ++k) {
      double scale = 0;
      const double d = max_abs_diff(std::span<const float>(got).subspan(size_t(k) * V, V),
                                    std::span<const float>(want).subspan(size_t(k) * V, V), &scale);
      EXPECT_LT(d, 2e-3 * std::max(1.0, scale)) << "case " << c << " slot " << k << " (max |logit| " << scale << ")";
      EXPECT_NEAR(props[0].confidence_logits[size_t(k)], want_conf[size_t(k)], 2e-3 * std::max(1.0f, std::fabs(want_conf[size_t(k)])))
          << "case " << c << " slot " << k;
      const auto row = std::span<const float>(got).subspan(size_t(k) * V, V);
      EXPECT_EQ(int32_t(std::max_element(row.begin(), row.end()) - row.begin()), int32_t(tk->int_at(k)))
          << "case " << c << " slot " << k;
    }

    // MTP-1: positions 0..a-1 with their next tokens; its draft is the token after the anchor.
    std::vector<float> last(hidden.size() / 3);  // layer 4 = the last tapped layer
    const int64_t W = cfg.hc_mult * cfg.hidden_size;
    for (int64_t t = 0; t < a; ++t) std::memcpy(last.data() + t * W, hidden.data() + (t * 3 + 2) * W, size_t(W) * 4);
    const std::vector<int32_t> next(ids.begin() + 1, ids.end());
    std::vector<speculative::IngestItem> mi{{slot, 0, int32_t(a), 0, next}};
    ASSERT_TRUE((*mtp)->ingest(mi, last).is_ok());
    std::vector<float> mgot;
    auto mdraw = [&](size_t, int32_t, std::span<const float> lg) {
      mgot.assign(lg.begin(), lg.end());
      return 0;
    };
    const speculative::ProposeItem mitem{slot, a, ids[size_t(a)], 1};
    ASSERT_TRUE((*mtp)->propose({&mitem, 1}, mdraw, props).is_ok());
    const std::vector<float> mwant = f32(ref->find(fmt::format("case.{}.mtp1_logits", c)));
    double scale = 0;
    const double d = max_abs_diff(mgot, mwant, &scale);
    EXPECT_LT(d, 2e-3 * std::max(1.0, scale)) << "case " << c << " mtp1";
  }
  EXPECT_EQ(cases, 3);
}

TEST(SpecDrafter, LoaderErrorsNameTheProblem) {
  auto cfg = io::load_model_config(model_dir());
  ASSERT_TRUE(cfg.is_ok());
  speculative::DraftConfig dc;
  auto none = speculative::load_dspark_weights(*cfg, dc, model_dir());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no DSpark drafter"), std::string::npos) << none.status().message();
  dc.mtp1_file = "nope/model.safetensors";
  auto missing = speculative::load_mtp1_weights(*cfg, dc, model_dir());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("nope/model.safetensors"), std::string::npos);
  // The MTP-1 file read as a DSpark drafter: names the missing tensors.
  auto dcr = speculative::load_draft_config(model_dir());
  ASSERT_TRUE(dcr.is_ok());
  EXPECT_EQ(dcr->block_size, 5);
  EXPECT_EQ(dcr->target_layer_ids, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(dcr->sts_temperatures.size(), 5u);
  auto wrong = speculative::load_dspark_weights(*cfg, *dcr, model_dir() + "/mtp1");
  ASSERT_FALSE(wrong.is_ok());
}

// A proposal after a gap (ProposeItem::context_start, Speculator::note_ingest): the DSpark block reads the ring only
// from context_start on, so a slot that ingested only [c, a) drafts exactly what a slot that ingested [0, a) drafts
// from the same start; from position 0 it would read rows never written (and so differ).
TEST(SpecDrafter, DsparkProposalReadsContextOnlyFromContextStart) {
  auto ref = io::Checkpoint::open(test::source_dir() + "/tests/fixtures/dspark-reference.safetensors");
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  auto m = model::DeepseekV4Cpu::load(model_dir(), model::Numerics::hf());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  auto ds = speculative::create_cpu_drafter(spec_config(speculative::SpecMethod::kDspark), (*m)->config(), 2);
  ASSERT_TRUE(ds.is_ok()) << ds.status().message();
  const int64_t c = (*ds)->resume_positions();
  EXPECT_LT(c, (*ds)->context_window());
  const io::TensorView* ids_t = ref->find("case.0.input_ids");
  ASSERT_NE(ids_t, nullptr);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < ids_t->numel(); ++i) ids.push_back(int32_t(ids_t->int_at(i)));
  const int64_t a = int64_t(ids.size()) - 1, start = a - c;
  ASSERT_GT(start, 0);
  const std::vector<int32_t> ctx(ids.begin(), ids.end() - 1);
  const std::vector<float> hidden = target_hidden(**m, ctx, (*ds)->tapped_layers());
  std::vector<speculative::IngestItem> ing{{0, 0, int32_t(a), 0, {}}, {1, start, int32_t(c), int32_t(start), {}}};
  ASSERT_TRUE((*ds)->ingest(ing, hidden).is_ok());
  auto logits = [&](int32_t slot, int64_t context_start) {
    std::vector<float> got;
    auto draw = [&](size_t, int32_t, std::span<const float> lg) {
      got.insert(got.end(), lg.begin(), lg.end());
      return int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
    };
    std::vector<speculative::Proposal> props;
    speculative::ProposeItem item{slot, a, ids[size_t(a)], 3};
    item.context_start = context_start;
    EXPECT_TRUE((*ds)->propose({&item, 1}, draw, props).is_ok());
    got.insert(got.end(), props[0].confidence_logits.begin(), props[0].confidence_logits.end());
    return got;
  };
  const std::vector<float> whole = logits(0, start);
  EXPECT_EQ(whole, logits(1, start));
  EXPECT_NE(logits(1, 0), whole);  // the unwritten rows [0, start) would count
  EXPECT_NE(logits(0, 0), whole);  // and the whole context drafts differently from the short one
}
