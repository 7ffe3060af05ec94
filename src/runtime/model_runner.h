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
  virtual bool is_cuda() const { return false; }
  // CUDA: GEMMs restricted to the fp32 CUDA-core kernels (no bf16 tensor-core rounding).
  virtual bool exact_math() const { return !is_cuda(); }
  // True when every float weight was stored as F32 (no bf16/fp8/fp4 rounding in the checkpoint).
  virtual bool fp32_weights() const = 0;
  // Bytes per row element of the state this runner stores (4 = fp32, 2 = bf16); the engine builds the
  // StateLayout with it.
  virtual int32_t kv_elem_bytes() const = 0;
  // Allocates the state memory for the engine's cache (num_slots slots, num_blocks blocks of `layout`);
  // no sequence will be longer than max_model_len.
  virtual Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks,
                            int64_t max_model_len) = 0;
  // Runs the plan's tokens; logits [plan.num_logits(), vocab], row i for token plan.logits_token_index[i]
  // (normally each sequence's last token; check-reference asks for every position).
  virtual Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) = 0;

  // Benchmark support (dsinfer bench); the default says the backend has none.
  struct OpTime {
    std::string name;
    int64_t layer;  // -1: not per layer
    float ms;
  };
  virtual Status set_timing(bool on) { return Status::errorf("{}: per-op timing is not supported", name()); }
  // Times of every named op of the last step, in execution order.
  virtual Result<std::vector<OpTime>> op_times() { return Status::errorf("{}: per-op timing is not supported", name()); }
  // Fills the bound state memory with small random values, so decode can be timed at a context length
  // without prefilling it first.
  virtual Status randomize_state(uint64_t seed) { return Status::errorf("{}: randomize_state is not supported", name()); }
};

struct RunnerOptions {
  std::string model_dir;
  std::string backend = "cpu";     // "cpu" or "cuda"
  std::string numerics = "official";
  std::string load_format = "auto";  // "auto" (safetensors) or "dummy" (random weights, CUDA only)
  int64_t num_layers = 0;            // > 0: run only the first N layers (dummy weights; benchmarks)
  bool exact_gemm = false;           // cuda: fp32 CUDA-core GEMMs only (check-reference's default)
};

// Creates the runner the options name; "cuda" fails clearly when the binary was built without CUDA.
Result<std::unique_ptr<ModelRunner>> create_runner(const RunnerOptions& opts);

}  // namespace dsinfer::runtime
