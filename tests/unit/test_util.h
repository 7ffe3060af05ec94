// Shared helpers for the unit tests: fixture paths, a scratch directory, and unwrapping a Result / Status in a
// helper so that a failed setup fails the test with its reason instead of crashing on a missing value.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <source_location>
#include <stdexcept>
#include <string>
#include <system_error>

#include "core/status.h"
#include "test_paths.h"

namespace dsinfer::test {

inline std::string source_dir() { return DSINFER_SOURCE_DIR; }
inline std::string own_fixture(const std::string& name) { return source_dir() + "/tests/fixtures/" + name; }

// Thrown by the helpers below after recording a gtest failure at the caller's line. gtest catches it and ends
// the current test: a helper that returns a value cannot ASSERT, and carrying on would dereference nothing.
struct SetupFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void setup_failed(const std::string& why, const std::source_location& at) {
  ADD_FAILURE_AT(at.file_name(), int(at.line())) << "test setup failed: " << why;
  throw SetupFailed(why);
}

// Fails the test (and ends it) unless `cond`.
inline void require(bool cond, const std::string& why, std::source_location at = std::source_location::current()) {
  if (!cond) setup_failed(why, at);
}
inline void require_ok(const Status& s, std::source_location at = std::source_location::current()) {
  if (!s.is_ok()) setup_failed(s.message(), at);
}
// The value of `r`, or the test fails (and ends) with r's error.
template <typename T>
T unwrap(Result<T> r, std::source_location at = std::source_location::current()) {
  if (!r.is_ok()) setup_failed(r.status().message(), at);
  return std::move(r).value();
}

// A fresh directory under the system temp dir, removed by the destructor. Fails the test when it cannot be made.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag, std::source_location at = std::source_location::current()) {
    path = std::filesystem::temp_directory_path() /
           ("dsinfer_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    std::filesystem::create_directories(path, ec);
    if (ec) setup_failed("cannot create scratch directory " + path.string() + ": " + ec.message(), at);
  }
  ~ScratchDir() {
    std::error_code ec;  // never throw from a destructor
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path.string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace dsinfer::test
