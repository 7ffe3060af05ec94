// Fuzz target: one line of an OpenAI Batch input file -> BatchLine (request validation of both endpoints),
// then the error record that echoes it, which must always be one valid JSON line.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "dsinfer/batch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  const std::string line(reinterpret_cast<const char*>(data), size);
  BatchLine bl;
  std::string err;
  const bool ok = parse_batch_line(line, 7, &bl, &err);
  const std::string rec = batch_error_line(7, bl.custom_id, ok ? "none" : "invalid_request", ok ? "" : err);
  if (rec.find('\n') != std::string::npos) std::abort();
  auto j = nlohmann::json::parse(rec, nullptr, false);
  if (j.is_discarded() || !j.is_object()) std::abort();
  return 0;
}
