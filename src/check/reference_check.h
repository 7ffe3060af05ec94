// Compares a model runner (any backend) with reference logits in the fixture format (../shared/fixtures): per prompt i,
// prompt.{i}.input_ids I64 [L], prompt.{i}.logits F32 [L,V], optional prompt.{i}.greedy_ids I64 [n] and
// prompt.{i}.greedy_logits F32 [n,V]. Each prompt runs one full forward, then its greedy continuation token by
// token on the incremental state (feeding the reference's tokens, so later steps stay comparable after a miss).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "engine/model_runner.h"

namespace dsinfer::check {

struct PromptCheck {
  int64_t len = 0;
  double rel_err = 0;      // max |ours - ref| / max |ref| over all compared logits
  size_t greedy_matched = 0, greedy_total = 0;
  bool ok = false;
};

struct ReferenceCheck {
  std::vector<PromptCheck> prompts;
  std::vector<io::TensorToWrite> computed;  // our logits with the reference's keys (for --dump-logits)
  bool ok() const;
};

// Default tolerance (docs/decisions.md): 1e-4 for fp32 checkpoints and 1e-3 for low-precision ones when the
// backend computes in fp32 (CPU, CUDA with exact GEMMs); 3e-2 when tensor-core GEMMs round operands to bf16.
double default_tolerance(engine::ModelRunner& runner);

// tolerance < 0 picks default_tolerance. The runner is bound to a fresh one-sequence state here.
Result<ReferenceCheck> check_reference(engine::ModelRunner& runner, const io::SafetensorsFile& reference, double tolerance,
                                       bool keep_logits);

}  // namespace dsinfer::check
