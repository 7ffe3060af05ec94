// Parity with HF tokenizers: every corpus string encodes to the golden ids (default and plain-text mode) for the
// DeepSeek-V4 tokenizer, and decoding the goldens gives the text back; plus 23 cases encoded independently of HF.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/unit/tokenizer_test_util.h"

namespace dsinfer::tokenizer {
namespace {

using testing::read_lines;

void check_parity(const std::string& name) {
  std::string why;
  const Tokenizer* tok = testing::load_v4(&why);
  ASSERT_NE(tok, nullptr) << why;
  const std::vector<std::string> corpus = testing::corpus();
  const std::string dir = testing::source_dir() + "/tests/data/tokenizer/";
  const auto golden = read_lines(dir + "golden_" + name + ".jsonl");
  ASSERT_EQ(golden.size(), corpus.size() + 1) << "golden file and corpus are out of step; rerun gen_goldens.py";
  ASSERT_GE(corpus.size(), 2000u);
  std::vector<std::vector<int32_t>> expected(corpus.size());
  size_t equal = 0, decode_equal = 0;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < corpus.size(); ++i) {
    expected[i] = nlohmann::json::parse(golden[i + 1]).get<std::vector<int32_t>>();
    ids.clear();
    Status s = tok->encode(corpus[i], ids);
    ASSERT_TRUE(s.is_ok()) << s.message();
    if (ids == expected[i]) ++equal;
    else if (equal + 5 > i) ADD_FAILURE() << name << " line " << i << " text " << nlohmann::json(corpus[i]).dump()
                                          << "\n got  " << nlohmann::json(ids).dump()
                                          << "\n want " << nlohmann::json(expected[i]).dump();
    auto text = tok->decode(expected[i]);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    if (*text == corpus[i]) ++decode_equal;
  }
  std::printf("[parity %s] default mode: %zu / %zu equal; decode round-trip %zu / %zu\n", name.c_str(), equal,
              corpus.size(), decode_equal, corpus.size());
  EXPECT_EQ(equal, corpus.size());
  EXPECT_EQ(decode_equal, corpus.size());

  // Plain-text mode: lines listed in the plain golden differ from default mode; all others are identical.
  std::vector<std::vector<int32_t>> plain = expected;
  for (const auto& l : read_lines(dir + "golden_" + name + "_plain.jsonl")) {
    auto j = nlohmann::json::parse(l);
    plain.at(j["i"].get<size_t>()) = j["ids"].get<std::vector<int32_t>>();
  }
  size_t plain_equal = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    ids.clear();
    ASSERT_TRUE(tok->encode(corpus[i], ids, EncodeMode::kPlainText).is_ok());
    if (ids == plain[i]) ++plain_equal;
    else if (plain_equal + 5 > i) ADD_FAILURE() << name << " plain line " << i << " got " << nlohmann::json(ids).dump();
    for (int32_t id : ids) ASSERT_FALSE(tok->is_special(id)) << "plain mode produced special token " << id;
  }
  std::printf("[parity %s] plain mode: %zu / %zu equal\n", name.c_str(), plain_equal, corpus.size());
  EXPECT_EQ(plain_equal, corpus.size());
}

TEST(TokenizerParity, DeepSeekV4MatchesHfGoldens) { check_parity("v4"); }

// 23 cases whose ids two implementations other than HF produced (for DeepSeek-V3, whose vocabulary, merges and
// added tokens below id 128815 V4 keeps: tests/data/tokenizer/independent_goldens.json says how it was checked).
TEST(TokenizerParity, IndependentGoldens) {
  std::string why;
  const Tokenizer* tok = testing::load_v4(&why);
  ASSERT_NE(tok, nullptr) << why;
  const std::string path = testing::source_dir() + "/tests/data/tokenizer/independent_goldens.json";
  std::ifstream f(path);
  ASSERT_TRUE(f) << "cannot open " << path;
  const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object() && j.contains("cases") && j["cases"].is_array()) << path << ": no \"cases\" array";
  ASSERT_GT(j["cases"].size(), 20u);
  for (const auto& c : j["cases"]) {
    auto ids = tok->encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.is_ok()) << ids.status().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << c["text"];
  }
}

}  // namespace
}  // namespace dsinfer::tokenizer
