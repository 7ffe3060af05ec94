// The forward's incremental-state contract: any split of a prompt into chunks, followed by token-by-token
// decoding, gives the logits of one full forward; a batch of mixed sequences gives each sequence's logits
// alone. The CPU reference processes every token with the same arithmetic whatever the batch, so both hold
// bit for bit, which is what these tests demand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>

#include "model/deepseek_v4.h"
#include "model/host_state.h"
#include "test_util.h"

using namespace dsinfer;
using namespace dsinfer::model;

namespace {

std::unique_ptr<DeepseekV4Cpu> load(const std::string& dir, const Numerics& num) {
  return test::unwrap(DeepseekV4Cpu::load(dir, num));  // a load error ends the test with the reason
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Logits of every position, produced by feeding `toks` in chunks of the given sizes (cycled).
std::vector<float> run_chunked(DeepseekV4Cpu& m, const std::vector<int32_t>& toks, const std::vector<int>& sizes) {
  auto state = test::unwrap(HostState::create(m.config(), 1, int64_t(toks.size())));
  SoloSequence seq(*state);
  std::vector<float> all, part;
  size_t i = 0, k = 0;
  while (i < toks.size()) {
    size_t n = std::min(toks.size() - i, size_t(sizes[k++ % sizes.size()]));
    Status st = seq.step(m, {toks.data() + i, n}, true, part);
    EXPECT_TRUE(st.is_ok()) << st.message();
    all.insert(all.end(), part.begin(), part.end());
    i += n;
  }
  EXPECT_EQ(seq.pos(), int64_t(toks.size()));
  return all;
}

struct Case {
  std::string dir;
  Numerics num;
};

class Incremental : public ::testing::TestWithParam<int> {
 protected:
  static std::vector<Case> cases() {
    return {{test::own_fixture("tiny-v4-a"), Numerics::hf()},
            {test::own_fixture("tiny-v4-b"), Numerics::hf()},
            {test::own_fixture("tiny-v4-c"), Numerics::hf()},
            {test::own_fixture("tiny-v4-official"), Numerics::official()}};
  }
};

}  // namespace

TEST_P(Incremental, ChunkedPrefillAndDecodeEqualFullForward) {
  const Case c = cases()[size_t(GetParam())];
  auto m = load(c.dir, c.num);
  ASSERT_TRUE(m);
  // 45 tokens cross several compression windows (ratios 4 and 8/16) and sliding windows (4..16).
  const auto toks = random_tokens(45, int(m->config().vocab_size), 3);
  const auto full = run_chunked(*m, toks, {45});
  for (const std::vector<int>& split : std::vector<std::vector<int>>{{1}, {3, 5}, {4}, {7, 1, 13}, {16, 2}, {30, 1}}) {
    const auto got = run_chunked(*m, toks, split);
    ASSERT_EQ(got.size(), full.size());
    EXPECT_EQ(got, full) << "split starting " << split[0];
  }
}

TEST_P(Incremental, MixedBatchEqualsEachSequenceAlone) {
  const Case c = cases()[size_t(GetParam())];
  auto m = load(c.dir, c.num);
  ASSERT_TRUE(m);
  const int V = int(m->config().vocab_size);
  // Four sequences in different phases: a long prefill, a decode, a mid-length chunk, a 1-token prompt.
  std::vector<std::vector<int32_t>> prompts = {random_tokens(23, V, 10), random_tokens(9, V, 11), random_tokens(17, V, 12),
                                               random_tokens(1, V, 13)};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(run_chunked(*m, p, {int(p.size())}));

  // Batched: sequence 1 is prefilled in an earlier step and then decodes inside the mixed step. Slots are
  // taken in a scrambled order so that no sequence sits where it sat when run alone.
  auto state = HostState::create(m->config(), 6, 32);
  ASSERT_TRUE(state.is_ok()) << state.status().message();
  SoloSequence filler(**state), s1(**state), s3(**state), s0(**state), s2(**state);
  std::vector<float> pre;
  const int32_t one = 7;
  ASSERT_TRUE(filler.step(*m, {&one, 1}, false, pre).is_ok());
  ASSERT_TRUE(s1.step(*m, {prompts[1].data(), 8}, true, pre).is_ok());
  std::vector<SeqChunk> chunks;
  for (auto [seq, toks, all] : {std::tuple{&s0, std::span<const int32_t>(prompts[0]), true},
                                std::tuple{&s1, std::span<const int32_t>(prompts[1].data() + 8, 1), true},
                                std::tuple{&s2, std::span<const int32_t>(prompts[2]), false},
                                std::tuple{&s3, std::span<const int32_t>(prompts[3]), true}}) {
    auto c = seq->next_chunk(toks, all);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    chunks.push_back(*c);
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
  expect_rows(0, 0, 23);
  expect_rows(1, 8, 1);
  expect_rows(2, 16, 1);  // only the last position of a chunk without all_logits
  expect_rows(3, 0, 1);
  EXPECT_EQ(row * Vs, out.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Incremental, ::testing::Range(0, 4));

TEST(Forward, RejectsBadTokensAndShortBlockTables) {
  auto m = load(test::own_fixture("tiny-v4-a"), Numerics::hf());
  ASSERT_TRUE(m);
  auto state = HostState::create(m->config(), 1, 64);
  ASSERT_TRUE(state.is_ok());
  SoloSequence seq(**state);
  std::vector<int32_t> bad = {5, int32_t(m->config().vocab_size)};
  std::vector<float> out;
  Status s = seq.step(*m, bad, true, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("token 1: id 512 is outside the vocabulary"), std::string::npos) << s.message();
  EXPECT_EQ(seq.pos(), 0);
  auto c = seq.next_chunk(std::span<const int32_t>(bad.data(), 1), true);
  ASSERT_TRUE(c.is_ok());
  c->start_pos = 1000;  // beyond what the table covers
  s = m->forward((*state)->pool(), {&*c, 1}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("block table covers"), std::string::npos) << s.message();
}

TEST(Forward, OfficialNumericsDifferFromHfButStayClose) {
  // The official profile adds FP8/FP4 simulations; on a random model they move logits a little, never a lot.
  auto hf = load(test::own_fixture("tiny-v4-official"), Numerics::hf());
  auto off = load(test::own_fixture("tiny-v4-official"), Numerics::official());
  ASSERT_TRUE(hf && off);
  const auto toks = random_tokens(24, int(hf->config().vocab_size), 5);
  const auto a = run_chunked(*hf, toks, {24}), b = run_chunked(*off, toks, {24});
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
    max_abs = std::max(max_abs, double(std::fabs(a[i])));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff / max_abs, 0.5);
}
