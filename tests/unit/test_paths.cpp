// The one unit-test file compiled with the build's paths (CMake defines DSINFER_PATH_* for it alone; test_paths.h).
#include "test_paths.h"

namespace dsinfer::test {

const char* build_source_dir() { return DSINFER_PATH_SOURCE_DIR; }
const char* build_binary() { return DSINFER_PATH_BINARY; }
const char* build_v4_tokenizer() { return DSINFER_PATH_V4_TOKENIZER; }

}  // namespace dsinfer::test
