// Which numerics profile produced a reference file, so check-reference compares like with like by default.
// In order:
//  1. the reference's safetensors __metadata__ "numerics" ("official" or "hf"; tools/fixtures and
//     tools/train/export.py write it);
//  2. reference.json next to it (the shared fixtures' description of how they were made): its "numerics"
//     field, else hf when it records a transformers run ("hf_source", or per-prompt "hf_*" figures);
//  3. hf, assumed: the fixture format is transformers' output (every reference without a word on it so far).
#pragma once
#include <string>

#include "core/status.h"
#include "io/safetensors.h"
#include "model/numerics.h"

namespace dsinfer::check {

struct ReferenceNumerics {
  model::Numerics numerics;
  std::string source;  // "reference metadata", "reference.json" or "assumed (transformers)"
};

// Fails (naming the file and the value) on an unknown numerics name or an unreadable reference.json.
Result<ReferenceNumerics> reference_numerics(const io::SafetensorsFile& reference);

}  // namespace dsinfer::check
