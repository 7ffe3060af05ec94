// The CPU backend: the reference forward (model/deepseek_v4.h) over host-memory state.
#pragma once
#include <memory>

#include "model/deepseek_v4.h"
#include "runtime/model_runner.h"

namespace dsinfer::runtime {

class CpuRunner final : public ModelRunner {
 public:
  explicit CpuRunner(std::unique_ptr<model::DeepseekV4Cpu> m) : model_(std::move(m)) {}
  const io::ModelConfig& config() const override { return model_->config(); }
  std::string name() const override { return "cpu (" + model_->numerics().name + " numerics)"; }
  int32_t kv_elem_bytes() const override { return 4; }
  bool fp32_weights() const override { return model_->weights().fp32_storage; }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;

 private:
  std::unique_ptr<model::DeepseekV4Cpu> model_;
  cache::StateLayout layout_;
  std::vector<float> slots_, blocks_;
  std::vector<model::SeqChunk> chunks_;
  std::vector<float> out_;
};

}  // namespace dsinfer::runtime
