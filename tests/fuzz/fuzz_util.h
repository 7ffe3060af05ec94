// Shared by the libFuzzer targets (tests/fuzz/*.cpp, built with -DDSINFER_FUZZ=ON, run by tools/fuzz.sh).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tests/build_paths.h"

namespace dsinfer::fuzz {

// The shipped model's tokenizer (models/dsv4-small): the real DeepSeek-V4 added tokens and pre-tokenizer.
inline const tokenizer::Tokenizer& shipped_tokenizer() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    auto t = tokenizer::Tokenizer::from_file(std::string(DSINFER_SOURCE_DIR) + "/models/dsv4-small/tokenizer.json");
    if (!t.is_ok()) {
      std::fprintf(stderr, "fuzz: %s\n", t.status().message().c_str());
      std::abort();
    }
    return std::move(t).value();
  }();
  return *tok;
}

}  // namespace dsinfer::fuzz
