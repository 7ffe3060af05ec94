// Helpers for the CLI tests: run the built dsinfer binary (DSINFER_BINARY) with a shell command line and
// capture its exit code, stdout and stderr; read JSONL files.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tests/build_paths.h"

namespace dsinfer::test {

struct CliResult {
  int rc = -1;  // exit code; 128 + signal when killed
  std::string out, err;
};

// The binary under test: DSINFER_BINARY, or $DSINFER_TEST_BINARY (e.g. an older build, to see a regression
// test fail before its fix).
inline const char* binary() {
  const char* b = std::getenv("DSINFER_TEST_BINARY");
  return b && *b ? b : DSINFER_BINARY;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `dsinfer <args>` (a shell fragment: quoting is the caller's) in `dir`'s scratch files.
inline CliResult run_cli(const ScratchDir& dir, const std::string& args, const std::string& stdin_file = "") {
  const std::string out = dir.str() + "/cli.out", err = dir.str() + "/cli.err";
  std::string cmd = std::string(binary()) + " " + args + " >" + out + " 2>" + err;
  if (!stdin_file.empty()) cmd += " <" + stdin_file;
  const int st = std::system(cmd.c_str());
  CliResult r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

}  // namespace dsinfer::test
