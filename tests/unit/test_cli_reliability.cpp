// Regression tests for issue 18 through the built binary: invalid UTF-8 end to end (also with --output equal
// to --input), output path checks, write errors, numeric flags, help / --version, the summary, duplicate ids,
// huge n / max_tokens, deep JSON, corrupt model files, tokenize / detokenize continuing past bad lines.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_test_util.h"

namespace dsinfer::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = own_fixture("tiny-v4-c");
const std::string kGood = R"({"custom_id": "good", "body": {"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0}})";

std::string deep(int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); }

// Defect 1: one invalid UTF-8 byte aborted the process after all generation (uncaught type_error while
// serialising the error record) and left the output empty; with --output equal to --input the input was lost
// (issue 36 refuses that outright: test_cli_hostile.cpp).
TEST(CliReliability, InvalidUtf8LinesGetErrorRecords) {
  ScratchDir d("utf8");
  const std::string in = d.str() + "/in.jsonl";
  std::ofstream(in) << kGood << "\n"
                    << "{\"custom_id\": \"latin1\", \"body\": {\"prompt\": \"caf\xe9\"}}\n"
                    << "{\"custom_id\": \"overlong\", \"body\": {\"prompt\": \"\xc0\xaf\"}}\n"
                    << "{\"custom_id\": \"bad-\xff-id\", \"body\": {\"prompt\": [1]}}\n"
                    << "{\"custom_id\": \"x\", \"body\": {\"prompt\": [1], \"extra\": \"\xed\xa0\x80\"}}\n";
  for (const std::string& out : {d.str() + "/out.jsonl"}) {
    CliResult r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output " + out);
    EXPECT_EQ(r.rc, 1) << r.err;
    std::vector<json> recs = read_jsonl(out);
    ASSERT_EQ(recs.size(), 5u) << r.err;
    EXPECT_TRUE(recs[0]["error"].is_null());
    EXPECT_EQ(recs[0]["custom_id"], "good");
    for (size_t i = 1; i < 5; ++i) {
      EXPECT_EQ(recs[i]["error"]["code"], "invalid_request") << recs[i].dump();
      EXPECT_NE(recs[i]["error"]["message"].get<std::string>().find(fmt::format("line {}", i + 1)), std::string::npos);
    }
    EXPECT_FALSE(fs::exists(out + ".partial"));
  }
}

// Defect 2: the output path was not checked before the run; write errors were not checked.
TEST(CliReliability, OutputPathAndWriteErrors) {
  ScratchDir d("outpath");
  const std::string in = d.str() + "/in.jsonl";
  std::ofstream(in) << kGood << "\n";
  // Checked before the model is loaded: the (missing) model is not even looked at.
  CliResult r = run_cli(d, "generate --model /nonexistent --input " + in + " --output " + d.str() + "/no/such/dir/out.jsonl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("output directory " + d.str() + "/no/such/dir does not exist"), std::string::npos) << r.err;
  r = run_cli(d, "generate --model /nonexistent --input " + in + " --output " + d.str());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output /dev/full");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("error writing /dev/full"), std::string::npos) << r.err;
  // Input that is a directory.
  r = run_cli(d, "generate --model " + kTiny + " --input " + d.str() + " --output " + d.str() + "/o.jsonl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("input " + d.str() + " is a directory"), std::string::npos) << r.err;
  // A partial file left by an interrupted run is not overwritten without --resume.
  std::ofstream(d.str() + "/o.jsonl.partial") << "{}\n";
  r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output " + d.str() + "/o.jsonl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("o.jsonl.partial exists"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(d.str() + "/o.jsonl.partial"), "{}\n");
}

// Defect 9: numeric flags went through unchecked casts (--max-num-seqs 1e10 reported -2147483648).
TEST(CliReliability, NumericFlagsAreRangeChecked) {
  ScratchDir d("flags");
  struct Case { std::string flags, want; };
  for (const Case& c : std::vector<Case>{
           {"--max-num-seqs 1e10", "--max-num-seqs expects an integer in [1, 1048576], found '1e10'"},
           {"--max-num-seqs 0", "--max-num-seqs expects an integer"},
           {"--max-num-batched-tokens 99999999999999999999", "--max-num-batched-tokens expects an integer"},
           {"--seed -1", "--seed expects an integer"},
           {"--max-tokens 2.5", "--max-tokens expects an integer"},
           {"--temperature nan", "--temperature expects a number"},
           {"--state-memory-gb inf", "--state-memory-gb expects a number"},
           {"--top-k x", "--top-k expects an integer"},
       }) {
    CliResult r = run_cli(d, "generate --model " + kTiny + " --prompt hi " + c.flags);
    EXPECT_EQ(r.rc, 2) << c.flags;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.flags << ": " << r.err;
  }
}

TEST(CliReliability, HelpGoesToStdoutAndVersion) {
  ScratchDir d("help");
  CliResult r = run_cli(d, "--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("usage: dsinfer <command>"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty());
  r = run_cli(d, "generate --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("usage: dsinfer generate"), std::string::npos);
  r = run_cli(d, "");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("usage:"), std::string::npos);
  r = run_cli(d, "--version");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("dsinfer ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
}

// Defect 9 (summary): with no finished request the latency percentiles printed "nan".
TEST(CliReliability, SummaryHasNoNanAndDuplicateIdsAreErrors) {
  ScratchDir d("summary");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << "not json\n" << R"({"custom_id": "a", "body": {"prompt": []}})" << "\n";
  CliResult r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output " + out);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.find("nan"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TTFT p50/p90/p99 n/a"), std::string::npos) << r.err;
  // Duplicate custom_id: the first runs, the second is an error record naming the id.
  std::ofstream(in) << kGood << "\n" << kGood << "\n";
  r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output " + out);
  EXPECT_EQ(r.rc, 1);
  std::vector<json> recs = read_jsonl(out);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_TRUE(recs[0]["error"].is_null());
  EXPECT_EQ(recs[1]["error"]["message"], "line 2: duplicate custom_id \"good\"");
}

// Defects 3, 4, 5 through the CLI: the batch finishes, each bad line gets its record.
TEST(CliReliability, HugeValuesAndDeepJsonLinesFinish) {
  ScratchDir d("huge");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << R"({"custom_id": "maxtok", "body": {"prompt": [5], "max_tokens": 9223372036854775807, "ignore_eos": true}})" "\n"
                    << R"({"custom_id": "n", "body": {"prompt": [5], "n": 2147483647}})" "\n"
                    << R"({"custom_id": )" << deep(100000) << R"(, "body": {"prompt": [5]}})" "\n"
                    << R"({"custom_id": "schema", "body": {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": )"
                    << deep(100000) << "}}}}\n"
                    << kGood << "\n";
  CliResult r = run_cli(d, "generate --model " + kTiny + " --input " + in + " --output " + out);
  EXPECT_EQ(r.rc, 1) << r.err;
  std::vector<json> recs = read_jsonl(out);
  ASSERT_EQ(recs.size(), 5u) << r.err;
  EXPECT_NE(recs[0]["error"]["message"].get<std::string>().find("exceeds max_model_len"), std::string::npos);
  EXPECT_NE(recs[1]["error"]["message"].get<std::string>().find("n must be at most 128"), std::string::npos);
  EXPECT_NE(recs[2]["error"]["message"].get<std::string>().find("nested deeper than 128"), std::string::npos);
  EXPECT_NE(recs[3]["error"]["message"].get<std::string>().find("nested deeper than 128"), std::string::npos);
  EXPECT_TRUE(recs[4]["error"].is_null());
}

// Defect 6 through the CLI: corrupt files are errors naming the file and key, never a crash.
TEST(CliReliability, CorruptModelFilesAreErrors) {
  ScratchDir d("corrupt");
  fs::copy(kTiny, d.path / "m");
  auto cfg = json::parse(slurp((d.path / "m/config.json").string()));
  cfg["eos_token_id"] = json::array({"x"});
  std::ofstream(d.path / "m/config.json") << cfg.dump();
  CliResult r = run_cli(d, "generate --model " + d.str() + "/m --prompt hi");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("config.json: 'eos_token_id[0]' must be an integer, found \"x\""), std::string::npos) << r.err;
  const std::string tok = d.str() + "/tokenizer.json", in = d.str() + "/in.txt";
  std::ofstream(tok) << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 2147483647, "content": "<x>"}]})";
  std::ofstream(in) << "\"a\"\n";
  for (const char* cmd : {"tokenize", "detokenize"}) {
    r = run_cli(d, std::string(cmd) + " --tokenizer " + tok, in);
    EXPECT_EQ(r.rc, 1) << cmd;
    EXPECT_NE(r.err.find("added_tokens[0].id = 2147483647 is far outside the vocabulary"), std::string::npos) << r.err;
  }
}

// Defect 7 through the CLI: a NaN embedding row (token 7) fails exactly the lines whose prompt holds it, with a
// "model_error" record; the other lines succeed.
TEST(CliReliability, NonFiniteLogitsGiveModelErrorRecords) {
  ScratchDir d("nan");
  fs::copy(kTiny, d.path / "m");
  const std::string st = (d.path / "m/model.safetensors").string();
  {
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), std::streamsize(n));
    const json e = json::parse(header)["model.embed_tokens.weight"];
    const int64_t D = e["shape"][1];
    f.seekp(std::streamoff(8 + n + e["data_offsets"][0].get<uint64_t>() + 7 * D * 4));
    const float nan = std::nanf("");
    for (int64_t k = 0; k < D; ++k) f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << R"({"custom_id": "poisoned", "body": {"prompt": [5, 7], "max_tokens": 3}})" "\n"
                    << R"({"custom_id": "fine", "body": {"prompt": [5, 6], "max_tokens": 3}})" "\n";
  CliResult r = run_cli(d, "generate --model " + d.str() + "/m --input " + in + " --output " + out);
  EXPECT_EQ(r.rc, 1) << r.err;
  std::vector<json> recs = read_jsonl(out);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0]["error"]["code"], "model_error");
  EXPECT_NE(recs[0]["error"]["message"].get<std::string>().find("non-finite logits"), std::string::npos);
  EXPECT_TRUE(recs[1]["error"].is_null());
  EXPECT_EQ(recs[1]["response"]["body"]["choices"][0]["token_ids"].size(), 3u);
}

// Defect 9: tokenize stopped at the first bad line.
TEST(CliReliability, TokenizeContinuesPastBadLines) {
  ScratchDir d("tok");
  const std::string tok = source_dir() + "/models/dsv4-small/tokenizer.json", in = d.str() + "/in.txt";
  std::ofstream(in) << "\"hello\"\n{broken\n\"caf\xe9\"\n42\n\"world\"\n";
  CliResult r = run_cli(d, "tokenize --tokenizer " + tok, in);
  EXPECT_EQ(r.rc, 1);
  std::vector<json> outs;
  std::istringstream ss(r.out);
  for (std::string line; std::getline(ss, line);) outs.push_back(json::parse(line));
  ASSERT_EQ(outs.size(), 5u) << r.out;
  EXPECT_TRUE(outs[0].is_array());
  EXPECT_NE(outs[1]["error"].get<std::string>().find("stdin line 2: not valid JSON"), std::string::npos);
  EXPECT_TRUE(outs[2].contains("error"));  // invalid UTF-8 is rejected by the JSON parser
  EXPECT_NE(outs[3]["error"].get<std::string>().find("expected a JSON string"), std::string::npos);
  EXPECT_TRUE(outs[4].is_array());
  EXPECT_NE(r.err.find("3 of 5 lines failed"), std::string::npos) << r.err;
  std::ofstream(in) << outs[0].dump() << "\n[1, 99999999]\n[-1]\n" << outs[4].dump() << "\n";
  r = run_cli(d, "detokenize --tokenizer " + tok, in);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "\"hello\"");
  EXPECT_NE(r.out.find("outside the vocabulary"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1), "\"world\"\n");
}

}  // namespace
}  // namespace dsinfer::test
