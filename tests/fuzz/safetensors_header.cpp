// Fuzz target: a whole safetensors file (8-byte header length, JSON header, data). Every input must either
// parse into tensors whose views lie inside the buffer, or fail with a Status.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  std::map<std::string, io::TensorView> tensors;
  std::map<std::string, std::string> metadata;
  Status s = io::parse_safetensors(data, size, "fuzz.safetensors", tensors, metadata);
  if (!s.is_ok()) return 0;
  for (const auto& [name, t] : tensors) {
    if (t.data < data || t.data + t.nbytes > data + size) std::abort();  // a view outside the file
    if (size_t(t.numel()) * dtype_size(t.dtype) != t.nbytes) std::abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes; i += 64) sink = sink + t.data[i];  // ASan: every view is readable
  }
  return 0;
}
