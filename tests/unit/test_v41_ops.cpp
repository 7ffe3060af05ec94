// DeepSeek-V4.1 ops on hand-computed values and on the fixtures' recorded Engram data: QAT quantizers, CSA2
// compressor / candidate blocks / top-k, numpy-compatible hash multipliers, prime layout, n-gram hashes, the
// compressed vocabulary, the Engram gate, the split mHC mixes, and the V4.1 storage-format dequantizers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io/quant.h"
#include "io/safetensors.h"
#include "model/deepseek_v41_vocab.h"
#include "ops/csa2/csa2.h"
#include "ops/engram/engram.h"
#include "ops/mhc/mhc.h"
#include "ops/qat/qat.h"
#include "test_util.h"

using namespace dsinfer;

namespace {
std::vector<int64_t> ints(const io::TensorView& t) {
  std::vector<int64_t> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.int_at(int64_t(i));
  return v;
}
const float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST(V41Qat, Fp8Per32WithUe8m0Scale) {
  EXPECT_EQ(ops::pow2_ceil_scale(1.0f), 1.0f);
  EXPECT_EQ(ops::pow2_ceil_scale(0.75f), 1.0f);
  EXPECT_EQ(ops::pow2_ceil_scale(1.5f), 2.0f);
  EXPECT_EQ(ops::pow2_ceil_scale(0.25f), 0.25f);
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;   // amax 3 -> scale 2^-7; 1/2^-7 = 128 is an e4m3 value
  x[1] = 0.3f;   // 38.4 -> 40 (step 4 in [32, 64)) -> 0.3125
  x[2] = -3.0f;  // -384 exact
  ops::fp8_qat_ref(x.data(), 32, 32);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 0.3125f);
  EXPECT_EQ(x[2], -3.0f);
  std::vector<float> odd(31, 0.3f);  // not a multiple of the block: left as is (transformers skips it)
  ops::fp8_qat_ref(odd.data(), 31, 32);
  EXPECT_EQ(odd[0], 0.3f);
}

TEST(V41Qat, Fp4RoundsHalfToEvenCode) {
  std::vector<float> x(32, 0.0f);
  const float in[] = {6.0f, 0.25f, 0.75f, 2.5f, 5.0f, 1.25f, -3.5f, 1.75f};
  const float want[] = {6.0f, 0.0f, 1.0f, 2.0f, 4.0f, 1.0f, -4.0f, 2.0f};
  std::copy(std::begin(in), std::end(in), x.begin());
  ops::fp4_qat_ref(x.data(), 32, 32, false);  // amax 6 -> UE8M0 scale 1
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(x[i], want[i]) << "value " << in[i];
  std::vector<float> y(16, 0.0f), z(16, 0.0f);
  y[0] = 3.0f;  // E4M3 scale e4m3(3 / 6) = 0.5
  y[1] = 1.1f;  // 2.2 -> 2 -> 1.0
  ops::fp4_qat_ref(y.data(), 16, 16, true);
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[1], 1.0f);
  ops::fp4_qat_ref(z.data(), 16, 16, true);  // all-zero block: scale floored at 2^-9, zeros stay zeros
  EXPECT_EQ(z[0], 0.0f);
}

TEST(V41Csa2, CompressorPoolsAlignedGroups) {
  const ops::Csa2CompressorParams p{2, 2, 3};
  std::vector<float> frontier(3 * 4, -1.0f), out(2, 0.0f);
  const float kv0[] = {1, 2}, g0[] = {0, std::log(3.0f)}, kv1[] = {3, 4}, g1[] = {0, 0};
  EXPECT_FALSE(ops::csa2_compress_step_ref(p, frontier.data(), kv0, g0, 0, out.data()));
  ASSERT_TRUE(ops::csa2_compress_step_ref(p, frontier.data(), kv1, g1, 1, out.data()));
  EXPECT_FLOAT_EQ(out[0], 2.0f);  // softmax(0, 0) = (1/2, 1/2)
  EXPECT_FLOAT_EQ(out[1], 2.5f);  // softmax(ln 3, 0) = (3/4, 1/4): 0.75 * 2 + 0.25 * 4
  const float kv2[] = {10, 10}, kv3[] = {20, 30};
  EXPECT_FALSE(ops::csa2_compress_step_ref(p, frontier.data(), kv2, g1, 2, out.data()));
  ASSERT_TRUE(ops::csa2_compress_step_ref(p, frontier.data(), kv3, g1, 3, out.data()));
  EXPECT_FLOAT_EQ(out[0], 15.0f);
  EXPECT_FLOAT_EQ(out[1], 20.0f);
}

TEST(V41Csa2, IndexScoresCandidatesAndTopk) {
  // 2 heads of dim 4: I[t] = sum_h w[h] relu(q_h . k_t) / 2
  const float q[] = {1, 0, 0, 0, 0, 1, 0, 0}, w[] = {1.0f, 2.0f};
  const float keys[] = {1, 1, 0, 0, -1, 3, 0, 0};
  auto sc = ops::csa2_index_scores_ref(q, w, 2, 4, keys, 2);
  EXPECT_FLOAT_EQ(sc[0], (1.0f + 2.0f) / 2);
  EXPECT_FLOAT_EQ(sc[1], (0.0f + 6.0f) / 2);
  const std::vector<float> s{0, 5, 0, 0, 1, 1, 1, 1, 0, 0};  // blocks of 4: max 5, 1, 0 (last block pinned)
  EXPECT_EQ((std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0, 1, 1}), ops::csa2_candidate_blocks_ref(s, 2, 4));
  EXPECT_EQ(std::vector<uint8_t>(10, 1), ops::csa2_candidate_blocks_ref(s, 5, 4));
  const std::vector<float> t{3, -kInf, 5, 5, 1};
  EXPECT_EQ((std::vector<int32_t>{2, 3}), ops::csa2_topk_ref(t, 2, nullptr));  // ties -> lower index
  const uint8_t mask[] = {1, 1, 0, 1, 1};
  EXPECT_EQ((std::vector<int32_t>{0, 3}), ops::csa2_topk_ref(t, 2, mask));
  EXPECT_EQ((std::vector<int32_t>{0, 2, 3, 4}), ops::csa2_topk_ref(t, 10, nullptr));  // -inf picks are dropped
}

TEST(V41Engram, NumpyCompatibleMultipliers) {
  // transformers' compute_hash_multipliers = 2 * default_rng(10007 * layer).integers(0, bound, 4) + 1, recorded in
  // the fixtures' reference.json (compressed vocab 156, layers 1/4 and 0/3) and research §2.2c (99092, layers 1/14).
  auto mult = [](int64_t layer, int64_t vocab) {
    auto v = ops::numpy_rng_integers(uint64_t(10007 * layer), (std::numeric_limits<int64_t>::max() / vocab) / 2, 4);
    for (auto& x : v) x = 2 * x + 1;
    return v;
  };
  EXPECT_EQ((std::vector<int64_t>{48677100393683547, 3074314114350149, 22841768265826691, 46997136175814265}), mult(1, 156));
  EXPECT_EQ((std::vector<int64_t>{52252112726664621, 3200031327883655, 46785051952115891, 12040226155260691}), mult(4, 156));
  EXPECT_EQ((std::vector<int64_t>{37659837278131649, 15950918151568115, 2422525993105757, 977182893392069}), mult(0, 156));
  EXPECT_EQ((std::vector<int64_t>{17485276350188205, 51870368797762293, 6909717677122821, 44652979207628809}), mult(3, 156));
  EXPECT_EQ((std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}), mult(1, 99092));
  EXPECT_EQ((std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}), mult(14, 99092));
}

TEST(V41Engram, ReleasedPrimeLayout) {
  // research §2.2b: consecutive primes above 15,999,999, 24 per layer; their sums are engram_num_embeddings.
  const auto L = ops::make_engram_hash_layout({1, 14}, 4, 8, 16000000, 99092, 2);
  ASSERT_EQ(L.primes.size(), 2u);
  EXPECT_EQ(L.primes[0][0], 16000057);
  EXPECT_EQ(L.primes[0][23], 16000463);
  EXPECT_EQ(L.primes[1][0], 16000477);
  EXPECT_EQ(L.primes[1][23], 16000889);
  EXPECT_EQ(L.offsets[1][1], 16000477);
  EXPECT_EQ(L.offsets[0][23] + L.primes[0][23], 384006168);
  EXPECT_EQ(L.offsets[1][23] + L.primes[1][23], 384016682);
}

TEST(V41Engram, FixtureVocabularyLayoutAndHashes) {
  for (const char* name : {"tiny-v41-a", "tiny-v41-b"}) {
    SCOPED_TRACE(name);
    const std::string dir = test::own_fixture(name);
    auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
    ASSERT_TRUE(ref.is_ok()) << ref.status().message();
    const auto& ts = ref->tensors();
    auto vocab = model::build_engram_vocab(dir + "/tokenizer.json");
    ASSERT_TRUE(vocab.is_ok()) << vocab.status().message();
    EXPECT_EQ(vocab->size, 156);
    EXPECT_EQ(vocab->token_map, ints(ts.at("engram.token_map")));
    const std::vector<int64_t> layers = std::string(name) == "tiny-v41-a" ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{0, 3};
    const int64_t vsize = std::string(name) == "tiny-v41-a" ? 128 : 96;
    const auto L = ops::make_engram_hash_layout(layers, 4, 2, vsize, 156, vocab->token_map[2]);
    std::vector<int64_t> primes, offsets, mults;
    for (size_t l = 0; l < 2; ++l) {
      primes.insert(primes.end(), L.primes[l].begin(), L.primes[l].end());
      offsets.insert(offsets.end(), L.offsets[l].begin(), L.offsets[l].end());
      mults.insert(mults.end(), L.multipliers[l].begin(), L.multipliers[l].end());
    }
    EXPECT_EQ(primes, ints(ts.at("engram.primes")));
    EXPECT_EQ(offsets, ints(ts.at("engram.offsets")));
    EXPECT_EQ(mults, ints(ts.at("engram.multipliers")));
    for (size_t i = 0; ts.count("prompt." + std::to_string(i) + ".input_ids"); ++i) {
      const auto ids = ints(ts.at("prompt." + std::to_string(i) + ".input_ids"));
      const auto want = ints(ts.at("prompt." + std::to_string(i) + ".engram_hash_ids"));
      std::vector<int64_t> got, tok(4);
      for (int64_t p = 0; p < int64_t(ids.size()); ++p) {
        for (int64_t s = 0; s < 4; ++s) tok[size_t(s)] = p - s >= 0 ? vocab->token_map[size_t(ids[size_t(p - s)])] : -1;
        for (int64_t l = 0; l < 2; ++l) {
          std::vector<int64_t> out(6);
          ops::engram_hash_ref(L, l, tok.data(), out.data());
          got.insert(got.end(), out.begin(), out.end());
        }
      }
      EXPECT_EQ(got, want) << "prompt " << i;
    }
  }
}

TEST(V41Engram, Normalization) {
  EXPECT_EQ(model::engram_normalize("\xEF\xAC\x81"), "fi");       // U+FB01 ligature (NFKC)
  EXPECT_EQ(model::engram_normalize(" The"), "the");
  EXPECT_EQ(model::engram_normalize("  "), " ");                 // a lone space survives Strip
  EXPECT_EQ(model::engram_normalize("\t\n"), " ");
  EXPECT_EQ(model::engram_normalize("\xE2\x85\xA8"), "ix");      // U+2168 ROMAN NUMERAL NINE
  EXPECT_EQ(model::engram_normalize("d\xC3\xA1"), "da");         // accent stripped
  EXPECT_EQ(model::engram_normalize("\xCC\x81"), "");            // a lone combining mark normalises to nothing
  EXPECT_EQ(model::engram_normalize("\xE2\x80\xA6"), "...");
  EXPECT_EQ(model::engram_normalize("a  \t b "), "a b");
}

TEST(V41Engram, GateWritesValueIntoStreams) {
  // 2 streams of dim 2, weights 1. Stream 0 matches its key: dot = 1 * rsqrt(.5)^2 / sqrt(2) = sqrt(2),
  // gate = sigmoid(2^(1/4)); stream 1 is orthogonal: |dot| floored at 1e-6, gate = sigmoid(1e-3).
  const float w[] = {1, 1, 1, 1}, key[] = {1, 0, 1, 0}, value[] = {2, -2};
  float x[] = {1, 0, 0, 1};
  const ops::EngramGateParams p{2, 2, 1e-20f, w};
  ops::engram_gate_ref(p, x, key, value);
  const double g0 = 1.0 / (1.0 + std::exp(-std::pow(2.0, 0.25))), g1 = 1.0 / (1.0 + std::exp(-1e-3));
  EXPECT_NEAR(x[0], 1 + 2 * g0, 1e-6);
  EXPECT_NEAR(x[1], -2 * g0, 1e-6);
  EXPECT_NEAR(x[2], 2 * g1, 1e-6);
  EXPECT_NEAR(x[3], 1 - 2 * g1, 1e-6);
  float y[] = {1, 0, 0, 1};
  ops::engram_gate_ref(p, y, key, value, false);  // image tokens pass through
  EXPECT_EQ(y[0], 1.0f);
}

TEST(V41Mhc, MixesPlusCollapseIsHcPre) {
  const int64_t n = 4, D = 8, rows = (2 + n) * n;
  std::vector<float> fn(static_cast<size_t>(rows * n * D)), base(static_cast<size_t>(rows)), scale{0.5f, 0.7f, 0.9f},
      x(static_cast<size_t>(n * D));
  for (size_t i = 0; i < fn.size(); ++i) fn[i] = float(std::sin(0.37 * double(i)));
  for (size_t i = 0; i < base.size(); ++i) base[i] = float(std::cos(1.3 * double(i)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(2.1 * double(i) + 0.5));
  const ops::HcParams p{fn.data(), base.data(), scale.data(), n, D, 20, 1e-6f, 1e-20f};
  auto zeros = [](int64_t k) { return std::vector<float>(static_cast<size_t>(k), 0.0f); };
  std::vector<float> y = zeros(D), post = zeros(n), comb = zeros(n * n), pre = zeros(n), y2 = zeros(D), post2 = zeros(n),
                     comb2 = zeros(n * n);
  ops::hc_pre_ref(p, x.data(), y.data(), post.data(), comb.data());
  ops::hc_mixes_ref(p, x.data(), pre.data(), post2.data(), comb2.data());
  ops::hc_collapse_ref(n, D, x.data(), pre.data(), y2.data());
  EXPECT_EQ(y, y2);
  EXPECT_EQ(post, post2);
  EXPECT_EQ(comb, comb2);
}

TEST(V41Quant, StorageFormatsOnHandValues) {
  // FP8 e4m3 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0; E8M0 126 = 0.5, 128 = 2.
  std::vector<uint8_t> q(32 * 64, 0x38);
  q[65] = 0x40;                   // row 1, col 1 (block 0, 0)
  q[2 * 64 + 40] = 0xB8;          // row 2, col 40 (block 0, 1)
  const uint8_t s32[] = {126, 128};  // [1, 2] blocks of 32x32
  std::vector<float> w(32 * 64);
  io::dequant_fp8_32x32(q.data(), 32, 64, s32, DType::F8_E8M0, w.data());
  EXPECT_EQ(w[0], 0.5f);
  EXPECT_EQ(w[65], 1.0f);
  EXPECT_EQ(w[2 * 64 + 40], -2.0f);
  EXPECT_EQ(w[31 * 64 + 63], 2.0f);
  // Engram rows: one scale per row and 32 channels.
  std::vector<uint8_t> rows(2 * 64, 0x38);
  const uint8_t srow[] = {127, 126, 129, 128};
  std::vector<float> e(2 * 64);
  io::dequant_fp8_row32(rows.data(), 2, 64, srow, DType::F8_E8M0, e.data());
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_EQ(e[32], 0.5f);
  EXPECT_EQ(e[64], 4.0f);
  EXPECT_EQ(e[127], 2.0f);
  // FP4 e2m1 experts, element 2c in the low nibble: byte 0x72 = (1.0, 6.0); 0x9F = (-6.0, -0.5).
  std::vector<uint8_t> packed(1 * 32, 0x00);
  packed[0] = 0x72;
  packed[16] = 0x9F;
  const uint8_t s4[] = {128, 126};  // per 32 inputs
  std::vector<float> f(64);
  io::dequant_fp4_row32(packed.data(), 1, 64, s4, DType::F8_E8M0, f.data());
  EXPECT_EQ(f[0], 2.0f);
  EXPECT_EQ(f[1], 12.0f);
  EXPECT_EQ(f[32], -3.0f);
  EXPECT_EQ(f[33], -0.25f);
  // Compressed-KV format: FP4 with one E4M3 scale per 16 (0x30 = 0.5 in e4m3).
  const uint8_t se4[] = {0x30, 0x38};
  std::vector<float> kv(32);
  io::dequant_fp4_e2m1(packed.data(), 1, 32, se4, DType::F8_E4M3, 16, kv.data());
  EXPECT_EQ(kv[1], 3.0f);
  EXPECT_EQ(kv[16], 0.0f);
}
