// Engine::abort: a request aborted mid-generation (or while still queued) ends with finish reason "abort",
// its state is freed at once, and the other requests produce exactly what they produce alone.
#include <gtest/gtest.h>

#include "dsinfer/engine.h"
#include "test_util.h"

namespace {

using dsinfer::Engine;
using dsinfer::RequestResult;

std::unique_ptr<Engine> make_engine(int32_t max_seqs) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::own_fixture("tiny-v4-c");
  o.max_model_len = 96;
  o.max_num_seqs = max_seqs;
  std::string err;
  auto e = Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  return e;
}

const char* kLong = R"({"prompt": [5, 9, 14, 2, 77], "max_tokens": 60, "temperature": 0, "ignore_eos": true, "n": 2})";
const char* kShort = R"({"prompt": [3, 1, 4, 1, 5, 9, 2, 6], "max_tokens": 12, "temperature": 0.8, "seed": 7, "ignore_eos": true})";

std::vector<int32_t> alone(const char* body) {
  auto e = make_engine(4);
  std::string err;
  EXPECT_NE(e->submit(body, &err), 0u) << err;
  std::vector<RequestResult> rs;
  EXPECT_TRUE(e->run_until_idle(rs, &err)) << err;
  return rs.empty() ? std::vector<int32_t>{} : rs[0].completions[0].token_ids;
}

TEST(Abort, MidGenerationFreesStateAndLeavesOthersAlone) {
  auto e = make_engine(4);
  std::string err;
  std::vector<dsinfer::TokenEvent> aborted_events;
  const uint64_t a = e->submit(kLong, &err);
  const uint64_t b = e->submit(kShort, &err);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u) << err;
  e->set_token_callback([&](const dsinfer::TokenEvent& ev) {
    if (ev.request_id == a && ev.finished) aborted_events.push_back(ev);
  });
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e->step(&err)) << err;
  const dsinfer::EngineStats before = e->stats();
  EXPECT_EQ(before.running_seqs, 3);
  EXPECT_EQ(before.state_slots_used, 3);
  ASSERT_TRUE(e->abort(a, &err)) << err;
  const dsinfer::EngineStats after = e->stats();
  EXPECT_EQ(after.running_seqs, 1);
  EXPECT_EQ(after.state_slots_used, 1);  // both samples of the aborted request gave their slot back
  EXPECT_LT(after.state_blocks_used, before.state_blocks_used);
  ASSERT_EQ(aborted_events.size(), 2u);
  for (const auto& ev : aborted_events) EXPECT_EQ(ev.finish_reason, "abort");

  std::vector<RequestResult> done = e->take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, a);
  for (const auto& c : done[0].completions) {
    EXPECT_EQ(c.finish_reason, "abort");
    EXPECT_GE(c.token_ids.size(), 3u);
    EXPECT_LT(c.token_ids.size(), 60u);
  }
  EXPECT_NE(done[0].response_json.find("\"finish_reason\":\"abort\""), std::string::npos);
  EXPECT_FALSE(e->abort(a, &err));  // already finished
  EXPECT_NE(err.find("already finished"), std::string::npos) << err;
  EXPECT_FALSE(e->abort(12345, &err));

  std::vector<RequestResult> rest;
  ASSERT_TRUE(e->run_until_idle(rest, &err)) << err;
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].id, b);
  EXPECT_EQ(rest[0].completions[0].token_ids, alone(kShort));
  const dsinfer::EngineStats end = e->stats();
  EXPECT_EQ(end.state_slots_used, 0);
  EXPECT_EQ(end.state_blocks_used, 0);
  EXPECT_EQ(end.running_requests + end.waiting_requests, 0);
}

TEST(Abort, QueuedRequestNeverRuns) {
  auto e = make_engine(1);  // one sequence at a time: the second request waits
  std::string err;
  const uint64_t a = e->submit(kShort, &err);
  const uint64_t b = e->submit(kShort, &err);
  ASSERT_TRUE(a && b) << err;
  ASSERT_TRUE(e->step(&err)) << err;
  EXPECT_EQ(e->stats().waiting_requests, 1);
  ASSERT_TRUE(e->abort(b, &err)) << err;
  EXPECT_EQ(e->stats().waiting_requests, 0);
  std::vector<RequestResult> rs = e->take_finished();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].completions[0].token_ids.empty());
  EXPECT_EQ(rs[0].completions[0].finish_reason, "abort");
  EXPECT_EQ(rs[0].completion_tokens, 0);
  ASSERT_TRUE(e->run_until_idle(rs, &err)) << err;
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].completions[0].token_ids, alone(kShort));
}

}  // namespace
