// DeepseekV41Cpu::Step (private to the deepseek_v41*.cpp files): one step's flattened tokens plus what a layer
// hands down the stack within the step -- the Engram hash ids, the top-k entries of the latest index source and
// the candidate-block mask of the candidate source, per token.
#pragma once
#include <span>
#include <vector>

#include "model/deepseek_v41.h"

namespace dsinfer::model {

struct DeepseekV41Cpu::Step : StepTokens {
  std::vector<int64_t> hashes;                   // [T, engram layers, cols] table rows
  std::vector<std::vector<int32_t>> topk;        // [T] compressed entries chosen by the latest index source
  std::vector<std::vector<uint8_t>> candidates;  // [T] candidate mask over the entries visible to the token
};

}  // namespace dsinfer::model
