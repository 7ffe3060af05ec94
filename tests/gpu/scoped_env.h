// An environment variable set (value) or unset (nullptr) for a scope, then restored: for GPU tests that pin a path a
// runner reads once at its creation (DSINFER_SPARSE_PREFILL_KERNEL, DSINFER_CUDA_GRAPHS, ...).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace dsinfer::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* key, const char* value) : key_(key) {
    if (const char* v = std::getenv(key)) old_ = v;
    if (value) setenv(key, value, 1);
    else unsetenv(key);
  }
  ~ScopedEnv() {
    if (old_) setenv(key_.c_str(), old_->c_str(), 1);
    else unsetenv(key_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string key_;
  std::optional<std::string> old_;
};

}  // namespace dsinfer::test
