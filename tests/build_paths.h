// Where the tests, fuzz targets and benches find the checkout and the built `dsinfer` binary. The paths are compiled
// into one generated file per build folder (CMake writes build/<preset>/generated/build_paths.cpp), not passed as -D
// flags: a flag holding the checkout's absolute path would change every compile command between clones, so ccache
// could never reuse a test object in CI's fresh clone.
#pragma once

namespace dsinfer::test {
const char* build_source_dir();       // the checkout (CMAKE_SOURCE_DIR)
const char* build_dsinfer_binary();   // the built dsinfer executable
}  // namespace dsinfer::test

#define DSINFER_SOURCE_DIR (::dsinfer::test::build_source_dir())
#define DSINFER_BINARY (::dsinfer::test::build_dsinfer_binary())
