#include "cuda/pdl.h"

#include <atomic>
#include <cstdlib>
#include <string>

namespace dsinfer::cuda {
namespace {
std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("DSINFER_PDL");
    return !(v && std::string(v) == "0");
  }()};
  return on;
}
}  // namespace

bool pdl_enabled() { return pdl_flag().load(std::memory_order_relaxed); }
void pdl_set_enabled(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }

}  // namespace dsinfer::cuda
