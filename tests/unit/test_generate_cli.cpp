// `dsinfer generate` on a JSONL file with good and bad lines: one output record per input line in input order,
// error records naming the problem, and exit code 1 because some lines failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "tests/build_paths.h"

using nlohmann::json;

TEST(GenerateCli, GoodAndBadLines) {
  dsinfer::test::ScratchDir d("gen");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << R"({"custom_id": "ok-1", "method": "POST", "url": "/v1/completions", "body": {"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0}})" "\n"
                    << "{broken json\n"
                    << R"({"custom_id": "bad-temp", "body": {"prompt": [5], "temperature": "hot"}})" "\n"
                    << R"({"custom_id": "bad-url", "url": "/v1/embeddings", "body": {"prompt": [5]}})" "\n"
                    << R"({"custom_id": "ok-2", "body": {"prompt": [9, 9], "max_tokens": 3, "logprobs": 2, "temperature": 0.5, "seed": 1}})" "\n";
  const std::string cmd = std::string(DSINFER_BINARY) + " generate --model " + dsinfer::test::own_fixture("tiny-v4-c") +
                          " --input " + in + " --output " + out + " 2>" + d.str() + "/err.txt";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);  // some lines failed
  std::ifstream f(out);
  std::vector<json> recs;
  for (std::string line; std::getline(f, line);) recs.push_back(json::parse(line));
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0]["custom_id"], "ok-1");
  EXPECT_TRUE(recs[0]["error"].is_null());
  const json& c0 = recs[0]["response"]["body"]["choices"][0];
  EXPECT_EQ(c0["token_ids"].size(), 4u);  // no tokenizer: ids are always returned
  EXPECT_EQ(recs[0]["response"]["body"]["usage"]["completion_tokens"], 4);
  EXPECT_NE(recs[1]["error"]["message"].get<std::string>().find("line 2: not valid JSON"), std::string::npos);
  EXPECT_NE(recs[2]["error"]["message"].get<std::string>().find("temperature"), std::string::npos);
  EXPECT_NE(recs[3]["error"]["message"].get<std::string>().find("unsupported url"), std::string::npos);
  EXPECT_EQ(recs[4]["custom_id"], "ok-2");
  EXPECT_EQ(recs[4]["response"]["body"]["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  std::ifstream e(d.str() + "/err.txt");
  std::stringstream ss;
  ss << e.rdbuf();
  EXPECT_NE(ss.str().find("summary: 5 requests (3 failed)"), std::string::npos) << ss.str();
}

TEST(GenerateCli, BadModelDirectoryIsAClearMessage) {
  dsinfer::test::ScratchDir d("genbad");
  const std::string cmd = std::string(DSINFER_BINARY) + " generate --model " + d.str() + "/nope --prompt hi 2>" + d.str() + "/err.txt";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  std::ifstream e(d.str() + "/err.txt");
  std::stringstream ss;
  ss << e.rdbuf();
  EXPECT_NE(ss.str().find("config.json"), std::string::npos) << ss.str();
}

// Issue 36: constrained lines compile their grammars on the engine's pool and join the run when ready (the other
// lines run meanwhile; tests/unit/test_structured_engine.cpp shows the ordering with a held compile). Every line still
// gets its record in input order: the constrained ones inside their constraint, a bad constraint as a clear error.
TEST(GenerateCli, ConstrainedLinesCompileOffTheStepLoop) {
  dsinfer::test::ScratchDir d("gencompile");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  json big = json::array();
  for (int i = 0; i < 3000; ++i) big.push_back("option number " + std::to_string(i * 7919));
  std::ofstream f(in);
  f << json{{"custom_id", "big"}, {"body", {{"prompt", "Pick:"}, {"max_tokens", 64}, {"temperature", 0},
                                            {"structured_outputs", {{"choice", big}}}}}}.dump() << "\n";
  for (int i = 0; i < 3; ++i)
    f << json{{"custom_id", "small-" + std::to_string(i)}, {"body", {{"prompt", "def f(x):"}, {"max_tokens", 4}}}}
             .dump()
      << "\n";
  f << json{{"custom_id", "yes-no"}, {"body", {{"prompt", "Is it?"}, {"max_tokens", 4}, {"temperature", 0},
                                               {"structured_outputs", {{"choice", {"yes", "no"}}}}}}}.dump() << "\n";
  f << json{{"custom_id", "bad-regex"}, {"body", {{"prompt", "x"}, {"structured_outputs", {{"regex", "(["}}}}}}.dump()
    << "\n";
  f.close();
  const std::string cmd = std::string(DSINFER_BINARY) + " generate --model " + dsinfer::test::source_dir() +
                          "/models/dsv4-small --input " + in + " --output " + out + " 2>" + d.str() + "/err.txt";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);  // the bad regex
  std::ifstream o(out);
  std::vector<json> recs;
  for (std::string line; std::getline(o, line);) recs.push_back(json::parse(line));
  ASSERT_EQ(recs.size(), 6u);
  const std::vector<std::string> ids = {"big", "small-0", "small-1", "small-2", "yes-no", "bad-regex"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(recs[i]["custom_id"], ids[i]);
  const std::string picked = recs[0]["response"]["body"]["choices"][0]["text"];
  EXPECT_TRUE(std::find(big.begin(), big.end(), json(picked)) != big.end()) << picked;
  for (size_t i = 1; i <= 3; ++i) EXPECT_TRUE(recs[i]["error"].is_null()) << recs[i].dump();
  const std::string yn = recs[4]["response"]["body"]["choices"][0]["text"];
  EXPECT_TRUE(yn == "yes" || yn == "no") << yn;
  EXPECT_NE(recs[5]["error"]["message"].get<std::string>().find("line 6"), std::string::npos) << recs[5].dump();
  EXPECT_NE(recs[5]["error"]["message"].get<std::string>().find("regex"), std::string::npos) << recs[5].dump();
}
