// Shared helpers for the unit tests: fixture paths and a scratch directory.
#pragma once
#include <filesystem>
#include <string>

namespace dsinfer::test {

inline std::string source_dir() { return DSINFER_SOURCE_DIR; }
inline std::string shared_fixture(const std::string& name) { return source_dir() + "/../shared/fixtures/" + name; }
inline std::string own_fixture(const std::string& name) { return source_dir() + "/tests/fixtures/" + name; }

// A fresh directory under the system temp dir, removed by the destructor.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("dsinfer_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string str() const { return path.string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace dsinfer::test
