// A file or folder of the checkout (configs/..., tests/fixtures/..., models/...) for the GPU tests: relative to the
// working directory first, where the GPU machine runs them from the root of a copied tree (the build's checkout path
// does not exist there), else under the checkout the build was configured from (ctest's working directory is the
// build folder).
#pragma once
#include <filesystem>
#include <string>

#include "tests/build_paths.h"

namespace dsinfer::test {

inline std::string checkout_path(const std::string& rel) {
  if (std::filesystem::exists(rel)) return rel;
  return std::string(DSINFER_SOURCE_DIR) + "/" + rel;
}

}  // namespace dsinfer::test
