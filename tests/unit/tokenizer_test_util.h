// Shared helpers for the tokenizer / chat tests: locating the V3 and V4 tokenizer.json files (V4 is fetched
// into build/tokenizer-cache by tools/tokenizer/fetch_v4_tokenizer.py) and reading JSONL test data.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <source_location>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::tokenizer::testing {

inline std::string source_dir() { return DSINFER_SOURCE_DIR; }
inline std::string v3_path() { return source_dir() + "/../shared/tokenizers/deepseek-v3/tokenizer.json"; }

// Path of the cached V4 tokenizer.json, fetching it when missing; empty (with *why) when it cannot be had.
inline std::string v4_path(std::string* why) {
  std::string cmd = "python3 " + source_dir() + "/tools/tokenizer/fetch_v4_tokenizer.py " + source_dir() +
                    "/build/tokenizer-cache 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) { *why = "cannot run " + cmd; return ""; }
  std::string out;
  std::array<char, 512> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  int rc = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (rc != 0) { *why = "DeepSeek-V4 tokenizer unavailable: " + out; return ""; }
  return out;
}

// Loads (once per process) the tokenizer of `name` ("v3" or "v4"); nullptr with *why when unavailable.
inline const Tokenizer* load(const std::string& name, std::string* why) {
  static std::unique_ptr<Tokenizer> cache[2];
  static std::string reasons[2];
  static bool tried[2] = {false, false};
  int k = name == "v3" ? 0 : 1;
  if (!tried[k]) {
    tried[k] = true;
    std::string path = k == 0 ? v3_path() : v4_path(&reasons[k]);
    if (!path.empty()) {
      auto r = Tokenizer::from_file(path);
      if (r.is_ok()) cache[k] = std::move(r).value();
      else reasons[k] = r.status().message();
    }
  }
  *why = reasons[k];
  return cache[k].get();
}

// Lines of a file split on '\n' only (the corpus holds U+0085 / U+2028, which are not line breaks here). A file
// that cannot be read, or holds no line, fails the test: a loop over zero lines would pass vacuously.
inline std::vector<std::string> read_lines(const std::string& path,
                                           std::source_location at = std::source_location::current()) {
  std::ifstream f(path, std::ios::binary);
  if (!f) dsinfer::test::setup_failed("cannot open test data file " + path, at);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> lines;
  std::string s = ss.str(), cur;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      if (i > start) lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  if (lines.empty()) dsinfer::test::setup_failed("test data file " + path + " holds no line", at);
  return lines;
}

// The tokenizer corpus: one JSON string per line; a line that is not one fails the test, naming it.
inline std::vector<std::string> corpus(std::source_location at = std::source_location::current()) {
  std::vector<std::string> out;
  const std::string path = source_dir() + "/tests/data/tokenizer/corpus.jsonl";
  for (const auto& l : read_lines(path, at)) {
    nlohmann::json j = nlohmann::json::parse(l, nullptr, /*allow_exceptions=*/false);
    if (!j.is_string())
      dsinfer::test::setup_failed(path + ": line " + std::to_string(out.size() + 1) + " is not a JSON string", at);
    out.push_back(j.get<std::string>());
  }
  return out;
}

}  // namespace dsinfer::tokenizer::testing
