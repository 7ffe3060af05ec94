// The public API (include/dsinfer/engine.h): submit, stream, collect; errors are strings naming the problem.
#include <gtest/gtest.h>

#include "dsinfer/engine.h"
#include "test_util.h"

TEST(PublicApi, SubmitStreamAndCollect) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::own_fixture("tiny-v4-c");
  o.max_model_len = 64;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  std::vector<int32_t> streamed;
  e->set_token_callback([&](const dsinfer::TokenEvent& ev) {
    streamed.insert(streamed.end(), ev.token_ids.begin(), ev.token_ids.end());
  });
  const uint64_t id = e->submit(R"({"prompt": [4, 8, 15, 16, 23, 42], "max_tokens": 6, "temperature": 0, "ignore_eos": true})", &err);
  ASSERT_NE(id, 0u) << err;
  EXPECT_EQ(e->submit("{not json", &err), 0u);
  EXPECT_NE(err.find("not valid JSON"), std::string::npos);
  EXPECT_EQ(e->submit(R"({"prompt": [1], "n": 0})", &err), 0u);
  EXPECT_NE(err.find("n must be at least 1, got 0"), std::string::npos) << err;
  std::vector<dsinfer::RequestResult> results;
  ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].id, id);
  ASSERT_EQ(results[0].completions.size(), 1u);
  EXPECT_EQ(results[0].completions[0].token_ids.size(), 6u);
  EXPECT_EQ(results[0].completions[0].token_ids, streamed);
  EXPECT_EQ(results[0].completions[0].finish_reason, "length");
  EXPECT_NE(results[0].response_json.find("\"text_completion\""), std::string::npos);
  dsinfer::EngineOptions bad = o;
  bad.backend = "tpu";
  EXPECT_FALSE(dsinfer::Engine::create(bad, &err));
  EXPECT_NE(err.find("unknown backend 'tpu'"), std::string::npos) << err;
}
