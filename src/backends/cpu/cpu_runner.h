// The CPU backend: a reference forward (model/deepseek_v4.h or model/deepseek_v41.h, behind CpuModel) over
// host-memory state.
#pragma once
#include <memory>

#include "backends/cpu/cpu_model.h"
#include "cache/state_copy.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

Result<std::unique_ptr<runner::ModelRunner>> create_cpu_runner(const runner::RunnerOptions& opts);

class CpuRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  explicit CpuRunner(std::unique_ptr<CpuModel> m) : model_(std::move(m)) {}
  const io::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cpu (" + model_->numerics().name + " numerics)"; }
  int32_t kv_elem_bytes() const override { return 4; }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  Status set_hidden_capture(std::vector<int64_t> layers) override;
  std::span<const float> captured_hidden() const override { return hidden_; }
  Status bind_snapshots(int32_t num_snapshots) override;
  Status bind_host_blocks(int32_t num_host_blocks) override;
  Status copy_state(std::span<const cache::StateCopy> copies) override;
  Status read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) override;
  Status write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) override;
  bool exact_math() const override { return true; }
  bool fp32_weights() const override { return model_->fp32_weights(); }
  // Its state memory (slots and blocks; the DP parallel runner copies between them and the pools it shares).
  cache::StateMemory state_memory();

 private:
  std::unique_ptr<CpuModel> model_;
  cache::StateLayout layout_;
  std::vector<float> slots_, blocks_;
  std::vector<float> snapshots_;  // prefix caching: [num_snapshots, slot_bytes / 4]
  std::vector<float> host_blocks_;  // prefix-cache host tier: [num_host_blocks, block_bytes / 4]
  int32_t num_slots_ = 0, num_blocks_ = 0, num_snapshots_ = 0, num_host_blocks_ = 0;
  std::vector<model::SeqChunk> chunks_;
  std::vector<float> out_;
  std::vector<int64_t> capture_layers_;  // speculative decoding: layers whose residual streams are kept
  std::vector<float> hidden_;            // [tokens, capture_layers_, hc * D] of the last step
};

}  // namespace dsinfer::backends
