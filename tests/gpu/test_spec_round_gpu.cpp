// The one-wait round's kernel (ops::cuda::spec_round_cuda) against its CPU reference: the greedy acceptance is
// sampling::verify_drafts with a greedy request (Sampler::sample's argmax: NaN as -inf, ties to the lower id), and
// the next propose's inputs and ingest rows are DsparkCuda::upload_block's packing of the anchors that acceptance gives
// (its rows per sequence at b * (g + 1)). Random logits with planted ties, NaNs, an all -inf row, and drafts planted to
// match a chosen prefix (every accepted length 0..L, L = 0..g).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/gpu_test_util.h"
#include "ops/draft_kernels/draft_kernels_cuda.h"
#include "sampling/sampler.h"
#include "sampling/spec_sampling.h"

namespace {

using dsinfer::ops::cuda::DraftKeys;
using dsinfer::ops::cuda::SpecRoundArgs;
using dsinfer::ops::cuda::SpecRoundRow;

struct Case {
  int32_t B, g;
  int64_t vocab, window;
};

void check_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t B = c.B, g = c.g, Bp = int32_t(std::max(1, 1 << int(std::ceil(std::log2(std::max(1, B))))));
  const int64_t V = c.vocab;
  std::vector<SpecRoundRow> rows(static_cast<size_t>(B));
  std::vector<int32_t> drafts(size_t(B) * size_t(g), 0);
  std::vector<int32_t> want_acc(static_cast<size_t>(B));
  int32_t logits_rows = 0;
  for (int32_t b = 0; b < B; ++b) {
    SpecRoundRow& r = rows[size_t(b)];
    r.L = int32_t(rng() % uint32_t(g + 1));
    r.slot = int32_t(rng() % 64);
    r.start_pos = int64_t(rng() % 300);
    r.context_start = (b % 3 == 0) ? std::max<int64_t>(0, r.start_pos - int64_t(rng() % 20)) : 0;
    r.logits_row = logits_rows;
    r.cap_row = 7 * b + 3;
    logits_rows += r.L + 1;
    want_acc[size_t(b)] = int32_t(rng() % uint32_t(r.L + 1));
  }
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> logits(size_t(logits_rows) * size_t(V));
  for (float& x : logits) x = u(rng);
  for (int64_t row = 0; row < logits_rows; ++row) {  // ties of the maximum, NaNs, an all -inf row
    float* p = logits.data() + row * V;
    const float mx = *std::max_element(p, p + V) + 1.0f;
    if (row % 3 == 0) p[int64_t(rng() % uint32_t(V))] = mx;
    if (row % 3 == 0) p[int64_t(rng() % uint32_t(V))] = mx;
    if (row % 4 == 1) p[int64_t(rng() % uint32_t(V))] = NAN;
    if (row == 2) std::fill(p, p + V, -INFINITY);
  }
  // The host reference: the greedy argmax of each row; drafts equal to it up to the planted accepted length, then one
  // that differs.
  dsinfer::sampling::Sampler sampler;
  dsinfer::SamplingParams params;
  params.temperature = 0.0;
  auto argmax = [&](int64_t row) {
    dsinfer::sampling::SampleInput in;
    in.logits = std::span<const float>(logits.data() + row * V, size_t(V));
    in.params = &params;
    return sampler.sample(in).token;
  };
  for (int32_t b = 0; b < B; ++b) {
    const SpecRoundRow& r = rows[size_t(b)];
    for (int32_t k = 0; k < r.L; ++k) {
      const int32_t t = argmax(r.logits_row + k);
      drafts[size_t(b) * size_t(g) + size_t(k)] = k < want_acc[size_t(b)] ? t : int32_t((t + 1 + rng() % 5) % V);
    }
  }
  namespace T = dsinfer::cuda::test;
  auto d_rows = T::to_device(rows);
  auto d_drafts = T::to_device(drafts);
  auto d_logits = T::to_device(logits);
  const size_t Tq = size_t(Bp) * size_t(g), In = size_t(Bp) * size_t(g + 1);
  auto d_acc = T::to_device(std::vector<int32_t>(size_t(Bp), -7));
  auto d_tokens = T::to_device(std::vector<int32_t>(In, -7));
  auto d_tok = T::to_device(std::vector<int32_t>(Tq, -7));
  auto d_pos = T::to_device(std::vector<int64_t>(Tq, -7));
  auto d_keys = T::to_device(std::vector<DraftKeys>(Tq));
  auto d_prev = T::to_device(std::vector<int32_t>(size_t(Bp), -7));
  auto d_irows = T::to_device(std::vector<int32_t>(In, -7));
  auto d_islot = T::to_device(std::vector<int32_t>(In, -7));
  auto d_ipos = T::to_device(std::vector<int64_t>(In, -7));
  SpecRoundArgs a;
  a.rows = d_rows.data();
  a.drafts = d_drafts.data();
  a.logits = d_logits.data();
  a.vocab = V;
  a.B = B;
  a.Bp = Bp;
  a.g = g;
  a.window = c.window;
  a.noise_token = 1;
  a.accepted = d_acc.data();
  a.tokens = d_tokens.data();
  a.tok = d_tok.data();
  a.pos = d_pos.data();
  a.keys = d_keys.data();
  a.prev = d_prev.data();
  a.ing_rows = d_irows.data();
  a.ing_slot = d_islot.data();
  a.ing_pos = d_ipos.data();
  ASSERT_TRUE(dsinfer::ops::cuda::spec_round_cuda(a, nullptr).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto acc = T::to_host(d_acc, size_t(Bp));
  const auto tokens = T::to_host(d_tokens, In);
  const auto tok = T::to_host(d_tok, Tq);
  const auto pos = T::to_host(d_pos, Tq);
  const auto keys = T::to_host(d_keys, Tq);
  const auto prev = T::to_host(d_prev, size_t(Bp));
  const auto irows = T::to_host(d_irows, In);
  const auto islot = T::to_host(d_islot, In);
  const auto ipos = T::to_host(d_ipos, In);
  for (int32_t b = 0; b < Bp; ++b) {
    const bool real = b < B;
    std::vector<dsinfer::sampling::SampleResult> ref;
    int64_t anchor = 0;
    int32_t bonus = a.noise_token;
    SpecRoundRow r;
    if (real) {
      r = rows[size_t(b)];
      dsinfer::sampling::VerifyInput vi;
      vi.logits = std::span<const float>(logits.data() + int64_t(r.logits_row) * V, size_t(r.L + 1) * size_t(V));
      vi.drafts = std::span<const int32_t>(drafts.data() + size_t(b) * size_t(g), size_t(r.L));
      vi.params = &params;
      dsinfer::sampling::verify_drafts(vi, sampler, dsinfer::sampling::LogprobsMode::Raw, ref);
      ASSERT_EQ(int32_t(ref.size()) - 1, want_acc[size_t(b)]) << "the planted drafts, sequence " << b;
      anchor = r.start_pos + int64_t(ref.size());
      bonus = ref.back().token;
    }
    const int32_t n = real ? int32_t(ref.size()) : 0;
    EXPECT_EQ(acc[size_t(b)], real ? n - 1 : 0) << "sequence " << b;
    EXPECT_EQ(prev[size_t(b)], bonus) << "sequence " << b;
    for (int32_t t = 0; t <= g; ++t) {
      const size_t i = size_t(b) * size_t(g + 1) + size_t(t);
      const bool c2 = t < n;
      EXPECT_EQ(tokens[i], c2 ? ref[size_t(t)].token : -1) << "sequence " << b << " token " << t;
      EXPECT_EQ(irows[i], c2 ? r.cap_row + t : 0) << "sequence " << b << " ingest row " << t;
      EXPECT_EQ(islot[i], c2 ? r.slot : -1) << "sequence " << b << " ingest row " << t;
      EXPECT_EQ(ipos[i], c2 ? r.start_pos + t : 0) << "sequence " << b << " ingest row " << t;
    }
    for (int32_t k = 0; k < g; ++k) {  // upload_block's packing
      const size_t i = size_t(b) * size_t(g) + size_t(k);
      EXPECT_EQ(tok[i], k == 0 && real ? bonus : a.noise_token) << "sequence " << b << " position " << k;
      EXPECT_EQ(pos[i], anchor + k);
      EXPECT_EQ(keys[i].slot, real ? r.slot : 0);
      EXPECT_EQ(keys[i].ring_lo, real ? std::max<int64_t>({0, anchor - c.window, r.context_start}) : 0);
      EXPECT_EQ(keys[i].ring_hi, anchor);
      EXPECT_EQ(keys[i].new_lo, b * g);
      EXPECT_EQ(keys[i].new_hi, b * g + g);
    }
  }
}

}  // namespace

TEST(DraftGpu, SpecRoundKernelMatchesHostVerification) {
  DSI_SKIP_WITHOUT_GPU();
  uint32_t seed = 1;
  for (const Case& c : {Case{1, 5, 3072, 64}, Case{3, 5, 3072, 64}, Case{8, 5, 3072, 64}, Case{13, 7, 129280, 128},
                        Case{64, 5, 3072, 6}})
    for (int rep = 0; rep < 4; ++rep) check_case(c, seed++);
  // Bad shapes are errors, not launches.
  SpecRoundArgs bad;
  bad.Bp = 1;
  bad.g = 5;
  bad.vocab = 3072;
  bad.window = 5;  // < g + 1
  EXPECT_FALSE(dsinfer::ops::cuda::spec_round_cuda(bad, nullptr).is_ok());
}
