// Compares a model runner (any backend) with reference logits in the fixture format (tests/fixtures): per prompt i,
// prompt.{i}.input_ids I64 [L], prompt.{i}.logits F32 [L,V], optional prompt.{i}.greedy_ids I64 [n] and
// prompt.{i}.greedy_logits F32 [n,V]. Each prompt runs one full forward, then its greedy continuation token by
// token on the incremental state (feeding the reference's tokens, so later steps stay comparable after a miss).
// The official-code format of the DeepSeek-V4.1 fixtures (official.safetensors) is read too: prompt.{i}.last_logits
// F32 [V] (last position of the prompt) and greedy_prefill_logits F32 [n,V] (last position after feeding
// greedy_ids[:k+1]), with the ids taken from the fixture's reference.safetensors; there the greedy check compares
// our argmax with the official logits' argmax at every step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "runner/model_runner.h"

namespace dsinfer::check {

struct PromptCheck {
  size_t index = 0;  // N of the reference's prompt.N.*
  int64_t len = 0;
  double rel_err = 0;      // max |ours - ref| / max |ref| over all compared logits
  double p99_rel_err = 0;  // their 99th percentile |ours - ref|, / max |ref| (the distribution behind a tolerance)
  size_t greedy_matched = 0, greedy_total = 0;
  bool logits_ok = false;  // rel_err within tolerance
  bool ok = false;         // logits_ok and every greedy step matched
};

struct ReferenceCheck {
  std::vector<PromptCheck> prompts;
  std::vector<io::TensorToWrite> computed;  // our logits with the reference's keys (for --dump-logits)
  // Every prompt within tolerance, and every greedy step matched -- or, with min_greedy_match < 1, at least that
  // fraction of all prompts' steps (for references whose exact argmax cannot be reproduced, docs/decisions.md).
  double min_greedy_match = 1.0;
  bool ok() const;
};

// Default tolerance (docs/decisions.md): 1e-4 for fp32 checkpoints and 1e-3 for low-precision ones when the
// backend computes in fp32 (CPU, CUDA with exact GEMMs); 3e-2 when tensor-core GEMMs round operands to bf16.
double default_tolerance(runner::ModelRunner& runner);

// tolerance < 0 picks default_tolerance. The runner is bound to a fresh one-sequence state here. `ids` supplies
// input_ids / greedy_ids for a reference in the official format (may be null otherwise).
Result<ReferenceCheck> check_reference(runner::ModelRunner& runner, const io::SafetensorsFile& reference, double tolerance,
                                       bool keep_logits, const io::SafetensorsFile* ids = nullptr,
                                       double min_greedy_match = 1.0);

}  // namespace dsinfer::check
