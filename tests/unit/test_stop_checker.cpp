// StopChecker: stop strings across token boundaries (held back, never output), stop tokens / EOS /
// ignore_eos, min_tokens, max_tokens; the released text is checked as the concatenation a client would see.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "sampling/stop_checker.h"

using namespace dsinfer::sampling;

namespace {

struct Run {
  std::vector<std::string> released;  // per token
  std::string text;                   // concatenation
  StopResult last;
  size_t tokens_fed = 0;
};

// Feeds (token, delta) pairs until finished; token ids default to 100 + index (not special).
Run feed(const SamplingParams& p, const std::vector<std::string>& deltas, std::vector<int32_t> tokens = {},
         int64_t eos = 2, int64_t max_tokens = 1000) {
  StopChecker sc(&p, eos, max_tokens);
  Run r;
  for (size_t i = 0; i < deltas.size(); ++i) {
    int32_t tok = i < tokens.size() ? tokens[i] : int32_t(100 + i);
    r.last = sc.append(tok, deltas[i]);
    r.released.push_back(r.last.text);
    r.text += r.last.text;
    r.tokens_fed = i + 1;
    if (r.last.finished) break;
  }
  return r;
}

// "<id>" (built with fmt: GCC 12 warns falsely on chained std::string operator+ under -Werror=restrict).
std::string angle(int32_t t) { return fmt::format("<{}>", t); }

}  // namespace

TEST(StopChecker, StopStringSplitAcrossTokens) {
  SamplingParams p;
  p.stop = {"World"};
  auto r = feed(p, {"Hel", "lo W", "or", "ld", "!!"});
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.reason, FinishReason::Stop);
  EXPECT_EQ(r.last.stop_string, "World");
  EXPECT_EQ(r.tokens_fed, 4u);
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_EQ(r.released, (std::vector<std::string>{"Hel", "lo ", "", ""}));  // "W", "Wor" held back
}

TEST(StopChecker, HeldBackTextIsReleasedWhenItDoesNotMatch) {
  SamplingParams p;
  p.stop = {"abc"};
  auto r = feed(p, {"xa", "b", "d", "e"});
  EXPECT_FALSE(r.last.finished);
  EXPECT_EQ(r.released, (std::vector<std::string>{"x", "", "abd", "e"}));
}

TEST(StopChecker, StopInsideOneDeltaTruncatesBeforeIt) {
  SamplingParams p;
  p.stop = {"\n\n"};
  auto r = feed(p, {"one\n", "\ntwo"});
  EXPECT_EQ(r.last.reason, FinishReason::Stop);
  EXPECT_EQ(r.text, "one");
}

TEST(StopChecker, EarliestOfSeveralStopStringsWins) {
  SamplingParams p;
  p.stop = {"cd", "bcx", "b"};
  auto r = feed(p, {"a", "bcd"});
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.last.stop_string, "b");
  SamplingParams q;
  q.stop = {"yz", "xy"};
  auto r2 = feed(q, {"wxyz"});
  EXPECT_EQ(r2.text, "w");
  EXPECT_EQ(r2.last.stop_string, "xy");
}

TEST(StopChecker, StopTokensAndEos) {
  struct Case {
    bool ignore_eos;
    std::vector<int32_t> stop_ids;
    std::vector<int32_t> tokens;
    size_t expect_fed;        // tokens consumed when finished (or all)
    bool finished;
    int32_t stop_token;
  };
  const std::vector<Case> cases = {
      {false, {}, {5, 6, 2, 7}, 3, true, 2},   // eos = 2
      {true, {}, {5, 6, 2, 7}, 4, false, -1},  // ignore_eos: 2 is ordinary
      {true, {6}, {5, 6, 2, 7}, 2, true, 6},   // stop_token_ids still apply
      {false, {7}, {5, 7, 2}, 2, true, 7},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    p.ignore_eos = c.ignore_eos;
    p.stop_token_ids = c.stop_ids;
    std::vector<std::string> deltas;
    for (int32_t t : c.tokens) deltas.push_back(angle(t));
    auto r = feed(p, deltas, c.tokens, /*eos=*/2);
    EXPECT_EQ(r.tokens_fed, c.expect_fed);
    EXPECT_EQ(r.last.finished, c.finished);
    if (c.finished) {
      EXPECT_EQ(r.last.reason, FinishReason::Stop);
      EXPECT_EQ(r.last.stop_token, c.stop_token);
      // The stop token's own text is not output.
      EXPECT_EQ(r.text.find(angle(c.stop_token)), std::string::npos);
    }
  }
}

TEST(StopChecker, StopTokenReleasesHeldBackText) {
  SamplingParams p;
  p.stop = {"END"};
  auto r = feed(p, {"fin E", ""}, {100, 2});
  EXPECT_EQ(r.released[0], "fin ");
  EXPECT_EQ(r.last.stop_token, 2);
  EXPECT_EQ(r.text, "fin E");
}

TEST(StopChecker, MinTokensDefersAllStops) {
  SamplingParams p;
  p.min_tokens = 3;
  p.stop = {"x"};
  // Token 2 (eos) and "x" arrive as tokens 1 and 2: ignored; the "x" at token 3 stops.
  auto r = feed(p, {"", "x", "x"}, {2, 100, 101});
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.tokens_fed, 3u);
  EXPECT_EQ(r.text, "x");
  EXPECT_EQ(r.last.stop_string, "x");
}

TEST(StopChecker, MaxTokensGivesLengthAndFlushesHeldText) {
  SamplingParams p;
  p.stop = {"STOP"};
  auto r = feed(p, {"a", "b", "ST", "c"}, {}, 2, /*max_tokens=*/3);
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.reason, FinishReason::Length);
  EXPECT_EQ(r.tokens_fed, 3u);
  EXPECT_EQ(r.text, "abST");
  EXPECT_STREQ(finish_reason_name(r.last.reason), "length");
}

TEST(StopChecker, MultiByteTextIsHeldOnCharacterBoundaries) {
  SamplingParams p;
  p.stop = {"\xC3\xA9t\xC3\xA9"};  // "été"
  auto r = feed(p, {"caf\xC3\xA9", "t", "\xC3\xA9!"});
  EXPECT_EQ(r.released[0], "caf");   // "é" could start "été"
  EXPECT_EQ(r.text, "caf");
  EXPECT_EQ(r.last.reason, FinishReason::Stop);
}
