// Crash-safe `dsinfer generate` (issue 18): a SIGINT in the middle of a 64-request run on the shipped model
// leaves every finished record on disk and a rerun with --resume completes the rest, reusing them; a run
// killed outright (SIGKILL: no chance to clean up) keeps its finished records in OUTPUT.partial for --resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cli_test_util.h"

namespace dsinfer::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

size_t count_lines(const std::string& path) {
  const std::string s = slurp(path);
  return size_t(std::count(s.begin(), s.end(), '\n'));
}

// Starts `dsinfer generate ...` in the background (stderr to `log`); returns its pid.
pid_t spawn_generate(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    std::vector<char*> argv{const_cast<char*>(binary()), const_cast<char*>("generate")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary(), argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Waits (bounded) until `path` holds at least n lines; false on timeout or when the process ended first.
bool wait_for_lines(const std::string& path, size_t n, pid_t pid, double timeout_s) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
    if (count_lines(path) >= n) return true;
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::map<std::string, std::string> records_by_id(const std::string& path, bool successes_only) {
  std::map<std::string, std::string> m;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // a record cut short by SIGKILL
    if (!successes_only || j["error"].is_null()) m[j["custom_id"].get<std::string>()] = line;
  }
  return m;
}

struct GenRun {
  std::string dir, in, out;
  std::vector<std::string> args(bool resume) const {
    std::vector<std::string> a{"--model", source_dir() + "/models/dsv4-small", "--input", in, "--output", out,
                               "--max-num-seqs", "8"};
    if (resume) a.push_back("--resume");
    return a;
  }
};

GenRun make_input(const ScratchDir& d, int n) {
  GenRun r{d.str(), d.str() + "/in.jsonl", d.str() + "/out.jsonl"};
  std::ofstream in(r.in);
  for (int i = 0; i < n; ++i)
    in << json{{"custom_id", "req-" + std::to_string(i)},
               {"method", "POST"},
               {"url", "/v1/completions"},
               {"body", {{"prompt", "Request number " + std::to_string(i) + ": the quick brown fox"}, {"max_tokens", 6}, {"temperature", 0}}}}
              .dump()
       << "\n";
  return r;
}

// 64 requests, the signal once 16 records are on disk (a quarter of the run: the 48 left take seconds, the signal
// milliseconds after the 16th line; the run had 200 requests until 2026-12-03, which only made --resume redo more).
constexpr size_t kSigintRequests = 64;

TEST(CliResume, SigintMidRunThenResumeCompletesTheRest) {
  ScratchDir d("sigint");
  const GenRun r = make_input(d, int(kSigintRequests));
  const std::string partial = r.out + ".partial";
  auto t0 = Clock::now();
  const pid_t pid = spawn_generate(r.args(false), r.dir + "/run1.log");
  ASSERT_TRUE(wait_for_lines(partial, 16, pid, 300)) << slurp(r.dir + "/run1.log");
  const size_t on_disk_at_signal = count_lines(partial);
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130) << slurp(r.dir + "/run1.log");
  const double run1_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // The output holds every line: the finished ones, and "aborted" errors for the rest; no partial file left.
  std::vector<json> recs = read_jsonl(r.out);
  ASSERT_EQ(recs.size(), kSigintRequests);
  EXPECT_FALSE(fs::exists(partial));
  size_t finished = 0, aborted = 0;
  for (const json& j : recs) {
    if (j["error"].is_null()) ++finished;
    else if (j["error"]["code"] == "aborted") ++aborted;
  }
  EXPECT_EQ(finished + aborted, kSigintRequests);
  EXPECT_GE(finished, on_disk_at_signal);
  EXPECT_GT(aborted, 0u) << "the run finished before the signal: make the test input longer";
  const auto first = records_by_id(r.out, true);

  // --resume runs only the aborted lines and keeps the finished records byte for byte.
  t0 = Clock::now();
  const pid_t pid2 = spawn_generate(r.args(true), r.dir + "/run2.log");
  EXPECT_EQ(wait_exit(pid2), 0) << slurp(r.dir + "/run2.log");
  const double run2_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string log2 = slurp(r.dir + "/run2.log");
  EXPECT_NE(log2.find("resume: " + std::to_string(finished) + " records reused"), std::string::npos) << log2;
  const auto second = records_by_id(r.out, true);
  EXPECT_EQ(second.size(), kSigintRequests);
  for (const auto& [id, line] : first) EXPECT_EQ(second.at(id), line) << id;
  recs = read_jsonl(r.out);
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i]["custom_id"], "req-" + std::to_string(i));  // input order
  std::printf("[sigint/resume] %zu requests: SIGINT after %.1f s with %zu records on disk -> %zu finished, %zu aborted; "
              "--resume ran %zu in %.1f s\n",
              kSigintRequests, run1_s, on_disk_at_signal, finished, aborted, aborted, run2_s);
}

TEST(CliResume, KilledRunKeepsThePartialFileForResume) {
  ScratchDir d("sigkill");
  const GenRun r = make_input(d, 48);
  const std::string partial = r.out + ".partial";
  const pid_t pid = spawn_generate(r.args(false), r.dir + "/run1.log");
  ASSERT_TRUE(wait_for_lines(partial, 8, pid, 300)) << slurp(r.dir + "/run1.log");
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  EXPECT_FALSE(fs::exists(r.out));
  const auto kept = records_by_id(partial, true);  // every complete line of the partial file parses
  EXPECT_GE(kept.size(), 8u);
  // Without --resume the partial file is not overwritten.
  CliResult refused = run_cli(d, "generate --model " + source_dir() + "/models/dsv4-small --input " + r.in + " --output " + r.out);
  EXPECT_EQ(refused.rc, 2);
  EXPECT_NE(refused.err.find("pass --resume"), std::string::npos) << refused.err;
  const pid_t pid2 = spawn_generate(r.args(true), r.dir + "/run2.log");
  EXPECT_EQ(wait_exit(pid2), 0) << slurp(r.dir + "/run2.log");
  const auto all = records_by_id(r.out, true);
  EXPECT_EQ(all.size(), 48u);
  for (const auto& [id, line] : kept) EXPECT_EQ(all.at(id), line) << id;
  EXPECT_FALSE(fs::exists(partial));
}

}  // namespace
}  // namespace dsinfer::test
