// Issue 36 (hostile input, round 3) through the built binary: `generate --resume` after the input changed reruns
// the changed lines; `--output` naming the input file (also through a symbolic or hard link) is refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli_test_util.h"

namespace dsinfer::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = own_fixture("tiny-v4-c");

std::string line(const std::string& id, int max_tokens, const std::string& prompt = "[5, 6, 7]") {
  return fmt::format(R"({{"custom_id": "{}", "body": {{"prompt": {}, "max_tokens": {}, "temperature": 0}}}})", id, prompt,
                     max_tokens);
}

std::map<std::string, json> by_id(const std::string& path) {
  std::map<std::string, json> m;
  for (const json& j : read_jsonl(path)) m[j["custom_id"].get<std::string>()] = j;
  return m;
}

int64_t completion_tokens(const json& rec) { return rec["response"]["body"]["usage"]["completion_tokens"].get<int64_t>(); }

// Before the fix a changed line under the same custom_id silently kept its old record ("resumed").
TEST(CliHostile, ResumeRerunsLinesWhoseRequestChanged) {
  ScratchDir d("resume_changed");
  const std::string in = d.str() + "/in.jsonl", out = d.str() + "/out.jsonl";
  std::ofstream(in) << line("a", 2) << "\n" << line("b", 2) << "\n" << line("c", 2) << "\n";
  const std::string cmd = "generate --model " + kTiny + " --input " + in + " --output " + out;
  CliResult r = run_cli(d, cmd);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto first = by_id(out);
  for (const auto& [id, rec] : first) EXPECT_EQ(rec["request_fingerprint"].get<std::string>().size(), 16u) << id;
  const std::string first_a = read_jsonl(out)[0].dump();

  // "a" only reformatted (same request: reused), "b" has a new max_tokens, "c" a new prompt, "d" is new.
  std::ofstream(in) << R"({"body": {"temperature": 0, "max_tokens": 2, "prompt": [5,6,7]}, "custom_id": "a"})" << "\n"
                    << line("b", 4) << "\n" << line("c", 2, "[9, 9]") << "\n" << line("d", 1) << "\n";
  r = run_cli(d, cmd + " --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resume: 1 records reused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume: 2 lines changed since the earlier run"), std::string::npos) << r.err;
  const auto second = by_id(out);
  ASSERT_EQ(second.size(), 4u);
  EXPECT_EQ(read_jsonl(out)[0].dump(), first_a);  // reused byte for byte
  EXPECT_EQ(completion_tokens(second.at("b")), 4);
  EXPECT_EQ(second.at("c")["response"]["body"]["usage"]["prompt_tokens"], 2);
  EXPECT_NE(second.at("c")["request_fingerprint"], first.at("c")["request_fingerprint"]);
  EXPECT_EQ(completion_tokens(second.at("d")), 1);

  // A record without a fingerprint (an older dsinfer's output) cannot be matched to its request: run again.
  std::ofstream(out) << R"({"id":"batch_req_1","custom_id":"a","response":{"status_code":200,"body":{}},"error":null})"
                     << "\n";
  r = run_cli(d, cmd + " --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("records reused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume: 1 lines changed"), std::string::npos) << r.err;
  EXPECT_EQ(completion_tokens(by_id(out).at("a")), 2);
}

// Before the fix `--output` equal to `--input` overwrote the requests with the results.
TEST(CliHostile, OutputThatIsTheInputIsRefused) {
  ScratchDir d("same_file");
  const std::string in = d.str() + "/in.jsonl";
  const std::string body = line("a", 2) + "\n";
  std::ofstream(in) << body;
  fs::create_symlink(in, d.str() + "/sym.jsonl");
  fs::create_hard_link(in, d.str() + "/hard.jsonl");
  fs::create_directory(d.str() + "/sub");
  struct Case { std::string input, output, want; };
  for (const Case& c : std::vector<Case>{
           {in, in, "is the input file " + in + " (the same file)"},
           {in, d.str() + "/sub/../in.jsonl", "(the same file through a link)"},
           {in, d.str() + "/sym.jsonl", "(the same file through a link)"},
           {in, d.str() + "/hard.jsonl", "(the same file through a link)"},
           {d.str() + "/sym.jsonl", in, "(the same file through a link)"},
       }) {
    // The model is not even looked at: the check comes first.
    CliResult r = run_cli(d, "generate --model /nonexistent --input " + c.input + " --output " + c.output);
    EXPECT_EQ(r.rc, 2) << c.output;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("choose another output path"), std::string::npos) << r.err;
    EXPECT_EQ(slurp(in), body);
  }
  // The input named as the output's partial file is refused as well, and with --resume.
  fs::rename(in, d.str() + "/o.jsonl.partial");
  CliResult r = run_cli(d, "generate --model " + kTiny + " --resume --input " + d.str() + "/o.jsonl.partial --output " +
                               d.str() + "/o.jsonl");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("which is the input file"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(d.str() + "/o.jsonl.partial"), body);
}

}  // namespace
}  // namespace dsinfer::test
