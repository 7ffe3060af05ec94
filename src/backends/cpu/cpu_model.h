// The CPU reference models behind one interface, so CpuRunner (and tests) drive DeepSeek-V4 and DeepSeek-V4.1
// the same way: config, numerics, precision facts and the step forward over a state pool.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "model/deepseek_v4.h"
#include "model/engram_placement.h"
#include "model/numerics.h"

namespace dsinfer::backends {

class CpuModel {
 public:
  virtual ~CpuModel() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual const model::Numerics& numerics() const = 0;
  virtual bool fp32_weights() const = 0;  // every float weight was stored as F32
  virtual void set_tap(model::TapFn tap) = 0;
  // Expert parallelism (cpu_parallel_runner.h): DeepSeek-V4 and V4.1, every layout.
  virtual Status set_expert_shard(model::ExpertShard shard) = 0;
  // Tensor-parallel attention (cpu_parallel_runner.h): DeepSeek-V4 and V4.1.
  virtual Status set_head_shard(model::HeadShard heads) = 0;
  virtual Status forward(const model::StatePool& state, std::span<const model::SeqChunk> chunks,
                         std::vector<float>& logits) = 0;
};

// Wraps a model class with the DeepseekV4Cpu-style interface (config(), numerics(), weights().fp32_storage,
// set_tap, forward).
template <class M>
class CpuModelOf final : public CpuModel {
 public:
  explicit CpuModelOf(std::unique_ptr<M> m) : m_(std::move(m)) {}
  const io::ModelConfig& config() const override { return m_->config(); }
  const model::Numerics& numerics() const override { return m_->numerics(); }
  bool fp32_weights() const override { return m_->weights().fp32_storage; }
  void set_tap(model::TapFn tap) override { m_->set_tap(std::move(tap)); }
  Status set_expert_shard(model::ExpertShard shard) override { return m_->set_expert_shard(std::move(shard)); }
  Status set_head_shard(model::HeadShard heads) override {
    if constexpr (requires { m_->set_head_shard(std::move(heads)); }) {
      m_->set_head_shard(std::move(heads));
      return Status::ok();
    } else {
      return Status::error("tensor-parallel attention over several ranks is not implemented for this model");
    }
  }
  Status forward(const model::StatePool& state, std::span<const model::SeqChunk> chunks, std::vector<float>& logits) override {
    return m_->forward(state, chunks, logits);
  }
  M& model() { return *m_; }

 private:
  std::unique_ptr<M> m_;
};

// Reads model_dir/config.json and loads the matching reference model (DeepSeek-V4 or DeepSeek-V4.1); `engram`
// places DeepSeek-V4.1's Engram tables (kDevice or kHost here; a model without them accepts kDevice only).
Result<std::unique_ptr<CpuModel>> load_cpu_model(const std::string& model_dir, const model::Numerics& num,
                                                 model::EngramPlacement engram = model::EngramPlacement::kDevice);

}  // namespace dsinfer::backends
