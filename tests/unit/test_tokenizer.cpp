// Tokenizer behaviour beyond golden parity: loader errors, invalid UTF-8 policy, the streaming detokenizer,
// the Oniguruma -> PCRE2 pattern rewrite, and the tokenize / detokenize CLI.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <random>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"
#include "tests/unit/tokenizer_test_util.h"
#include "tests/build_paths.h"

namespace dsinfer::tokenizer {
namespace {

// The DeepSeek-V4 tokenizer; a missing one ends the test as a failure naming the file and the install step
// (test::setup_failed), never an uncaught exception.
const Tokenizer& v4() {
  std::string why;
  const Tokenizer* t = testing::load_v4(&why);
  if (!t) dsinfer::test::setup_failed(why, std::source_location::current());
  return *t;
}

TEST(TokenizerLoad, BadFilesGiveClearErrors) {
  struct Case { const char* json; const char* needle; };
  const Case cases[] = {
      {"{not json", "not valid JSON"},
      {"[1]", "not a JSON object"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "model.merges"},
      {R"({"model": {"type": "Unigram", "vocab": {}, "merges": []}})", "Unigram"},
      {R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})", "normalizer"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "merged token \"ab\""},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})", "model.merges[0]"},
      {R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}})", "model.vocab[\"a\"]"},
      {R"({"added_tokens": [{"content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}})", "added_tokens[0]"},
      {R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}}, "model": {"type": "BPE", "vocab": {}, "merges": []}})",
       "does not compile"},
      {R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})", "Metaspace"},
  };
  for (const auto& c : cases) {
    auto r = Tokenizer::from_json_text(c.json, "test.json");
    ASSERT_FALSE(r.is_ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("test.json"), std::string::npos) << r.status().message();
  }
  auto missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(TokenizerEncode, InvalidUtf8IsAnErrorWithOffset) {
  std::vector<int32_t> ids = {7};
  Status s = v4().encode(std::string("ab\xC3(", 4), ids);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("offset 2"), std::string::npos) << s.message();
  EXPECT_EQ(ids, std::vector<int32_t>{7});  // untouched
  EXPECT_FALSE(v4().encode(std::string("\xED\xA0\x80", 3)).is_ok());  // surrogate
  EXPECT_FALSE(v4().encode(std::string("\xF0\x9F\x98", 3)).is_ok());  // truncated
  EXPECT_TRUE(v4().encode("").is_ok());
  EXPECT_TRUE(v4().encode("")->empty());
}

TEST(TokenizerEncode, PlainModeNeverProducesAddedTokens) {
  const std::string text = "<｜begin▁of▁sentence｜>hi<｜User｜>";
  auto with = v4().encode(text);
  auto plain = v4().encode(text, EncodeMode::kPlainText);
  ASSERT_TRUE(with.is_ok() && plain.is_ok());
  EXPECT_EQ(with->front(), *v4().token_to_id("<｜begin▁of▁sentence｜>"));
  for (int32_t id : *plain) EXPECT_FALSE(v4().is_special(id));
  EXPECT_EQ(*v4().decode(*plain), text);
}

TEST(TokenizerDecode, OutOfRangeIdsAndSkipSpecial) {
  auto bad = v4().decode(std::vector<int32_t>{1, -1});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("-1"), std::string::npos);
  EXPECT_FALSE(v4().decode(std::vector<int32_t>{int32_t(v4().vocab_size())}).is_ok());
  auto ids = *v4().encode("<｜begin▁of▁sentence｜>Hi");
  EXPECT_EQ(*v4().decode(ids, /*skip_special_tokens=*/true), "Hi");
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  std::string out;
  utf8_append_lossy(std::string("a\xF0\x9F\x98" "b\xE2\x82\xFF\xC0\xAF" "c", 11), out);
  // F0 9F 98 -> one U+FFFD; E2 82 -> one; FF -> one; C0 -> one; AF -> one.
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "c");
  EXPECT_EQ(utf8_first_invalid("plain ascii and ü"), std::string::npos);
}

TEST(StreamDecoder, NeverEmitsBrokenUtf8AndMatchesDecode) {
  const Tokenizer& tok = v4();
  std::mt19937 rng(7);
  auto corpus = testing::corpus();
  size_t checked = 0, held = 0;
  for (size_t i = 0; i < corpus.size(); i += 7) {
    auto ids = *tok.encode(corpus[i]);
    // Also random ids (arbitrary byte soup, incl. invalid UTF-8) appended to every other line.
    if (i % 2) for (int k = 0; k < 20; ++k) ids.push_back(static_cast<int32_t>(rng() % 128000));
    StreamDecoder sd(tok);
    std::string all;
    for (int32_t id : ids) {
      std::string piece;
      ASSERT_TRUE(sd.push(id, piece).is_ok());
      ASSERT_EQ(utf8_first_invalid(piece), std::string::npos) << "broken UTF-8 emitted";
      held += sd.pending() > 0;
      all += piece;
    }
    std::string tail;
    sd.finish(tail);
    all += tail;
    EXPECT_EQ(all, *tok.decode(ids)) << "line " << i;
    ++checked;
  }
  EXPECT_GT(checked, 300u);
  EXPECT_GT(held, 0u);  // multi-byte characters really were split across tokens
  StreamDecoder sd(tok);
  std::string out;
  EXPECT_FALSE(sd.push(-5, out).is_ok());
}

TEST(StreamDecoder, IncompleteTailBecomesReplacementAtFinish) {
  const Tokenizer& tok = v4();
  // Find the id of the single byte 0xF0 (a 4-byte lead) by its byte-level spelling.
  auto lead = tok.token_to_id("ð");
  ASSERT_TRUE(lead.has_value());
  StreamDecoder sd(tok);
  std::string out;
  ASSERT_TRUE(sd.push(*lead, out).is_ok());
  EXPECT_EQ(out, "");
  EXPECT_EQ(sd.pending(), 1u);
  sd.finish(out);
  EXPECT_EQ(out, "\xEF\xBF\xBD");
}

TEST(Pretokenizer, RewriteAddsUnicode16Letters) {
  std::string p = rewrite_pattern_for_pcre2(R"([^\r\n\p{L}\p{P}]?\p{L}+|\s+(?!\S))");
  EXPECT_NE(p.find(R"(\x{1E030}-\x{1E06D})"), std::string::npos) << p;  // Cyrillic ext-D letters (Unicode 15)
  EXPECT_NE(p.find(R"(\x{85})"), std::string::npos) << p;               // NEL is White_Space in Oniguruma
  EXPECT_EQ(rewrite_pattern_for_pcre2(R"([A-Za-z]+\d)"), R"([A-Za-z]+\d)");
  // U+1E030 (Unicode 15 letter) joins the preceding letters into one word, as HF does.
  auto ids = *v4().encode("x\U0001E030y");
  auto ids2 = *v4().encode("x\U0001E030");
  EXPECT_EQ(*v4().decode(ids), "x\U0001E030y");
  EXPECT_LE(ids2.size(), ids.size());
}

std::string run_cli(const std::string& args, const std::string& input, int* rc) {
  // Per process: other checkouts' test runs on the same machine use the same temp dir.
  std::string in_path = ::testing::TempDir() + "/cli_in_" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(in_path) << input;
  std::string cmd = std::string(DSINFER_BINARY) + " " + args + " < " + in_path + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = WEXITSTATUS(::pclose(p));
  return out;
}

std::string v4_path_or_fail() {
  std::string why;
  const std::string p = testing::v4_path(&why);
  if (p.empty()) dsinfer::test::setup_failed(why, std::source_location::current());
  return p;
}

TEST(TokenizeCli, RoundTripsAndReportsBadLines) {
  const std::string tok = "--tokenizer " + v4_path_or_fail();
  int rc = 0;
  std::string ids = run_cli("tokenize " + tok, "\"Hello <｜User｜> 世界\"\n\"\"\n", &rc);
  ASSERT_EQ(rc, 0) << ids;
  auto first = nlohmann::json::parse(ids.substr(0, ids.find('\n')));
  EXPECT_EQ(first.get<std::vector<int32_t>>(), *v4().encode("Hello <｜User｜> 世界"));
  std::string text = run_cli("detokenize " + tok, ids, &rc);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_EQ(text, "\"Hello <｜User｜> 世界\"\n\"\"\n");
  std::string plain = run_cli("tokenize --plain " + tok, "\"<｜User｜>\"\n", &rc);
  EXPECT_EQ(nlohmann::json::parse(plain).get<std::vector<int32_t>>(), *v4().encode("<｜User｜>", EncodeMode::kPlainText));
  std::string err = run_cli("tokenize " + tok, "\"ok\"\n{bad\n", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("line 2"), std::string::npos) << err;
  err = run_cli("detokenize " + tok, "[1, 99999999]\n", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("99999999"), std::string::npos) << err;
  err = run_cli("tokenize --tokenizer /nonexistent.json", "", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("/nonexistent.json"), std::string::npos) << err;
}

}  // namespace
}  // namespace dsinfer::tokenizer
