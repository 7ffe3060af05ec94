// ModelRunner: the seam between the engine (host logic, no CUDA) and a compute backend. A runner owns the
// model weights and the memory of the per-sequence state (laid out by the engine's cache::StateLayout) and
// turns one BatchPlan into logits. Chosen at start-up: CPU reference (cpu_runner.h) or CUDA (cuda_runner.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cache/state_cache.h"
#include "core/status.h"
#include "io/config.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::runtime {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual std::string name() const = 0;
  // Bytes per row element of the state this runner stores (4 = fp32, 2 = bf16); the engine builds the
  // StateLayout with it.
  virtual int32_t kv_elem_bytes() const = 0;
  // Allocates the state memory for the engine's cache (num_slots slots, num_blocks blocks of `layout`).
  virtual Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks) = 0;
  // Runs the plan's tokens; logits [plan.num_logits(), vocab] in logits_row order.
  virtual Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) = 0;
};

struct RunnerOptions {
  std::string model_dir;
  std::string backend = "cpu";     // "cpu" or "cuda"
  std::string numerics = "official";
  std::string load_format = "auto";  // "auto" (safetensors) or "dummy" (random weights, CUDA only)
};

// Creates the runner the options name; "cuda" fails clearly when the binary was built without CUDA.
Result<std::unique_ptr<ModelRunner>> create_runner(const RunnerOptions& opts);

}  // namespace dsinfer::runtime
