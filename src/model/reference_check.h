// Compares the model with reference logits in the fixture format (../shared/fixtures): per prompt i,
// prompt.{i}.input_ids I64 [L], prompt.{i}.logits F32 [L,V], optional prompt.{i}.greedy_ids I64 [n] and
// prompt.{i}.greedy_logits F32 [n,V]. Each prompt runs one full forward, then its greedy continuation token by
// token on the incremental state (feeding the reference's tokens, so later steps stay comparable after a miss).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "model/deepseek_v4.h"

namespace dsinfer::model {

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

// tolerance < 0 picks the default: 1e-4 for fp32 checkpoints, 1e-3 otherwise (docs/decisions.md).
double default_tolerance(const DeepseekV4Cpu& model);

Result<ReferenceCheck> check_reference(DeepseekV4Cpu& model, const io::SafetensorsFile& reference, double tolerance,
                                       bool keep_logits);

}  // namespace dsinfer::model
