// CudaRunnerV41: the CUDA ModelRunner of DeepSeek-V4.1, op for op the CPU reference (model/deepseek_v41*.cpp)
// under transformers numerics (hf, hf-noqat). A class of its own, next to the V4 CudaRunner: it shares the step
// plan, the op timer and the V4 kernels (embed, GEMM, RMSNorm / RoPE, mHC with the carried pre, MoE, sparse
// attention, ring write) and adds the CSA2 and Engram kernels (ops/csa2, ops/engram). Parts:
//   cuda_runner_v41_cuda.cpp   creation, state binding, the step
//   forward_v41_cuda.cpp       the per-step forward (embed, Engram, mHC sites, MoE, final collapse, head), scratch
//   attention_v41_cuda.cpp     CSA2 attention (projections, KV-source emission, indexer, sparse attention)
//   device_weights_v41*        the weights on the GPU (exact fp32 upload or dummy weights)
// No CUDA graphs (decode runs the kernels directly).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/step/op_timer.h"
#include "backends/cuda/step/step_plan.h"
#include "backends/cuda/weights/device_weights_v41.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "model/numerics.h"
#include "ops/engram/engram_launch.h"
#include "ops/moe/moe_cuda.h"
#include "ops/step_cuda.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

Result<std::unique_ptr<runner::ModelRunner>> create_cuda_runner_v41(const runner::RunnerOptions& opts);

class CudaRunnerV41 final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  CudaRunnerV41(io::ModelConfig cfg, model::Numerics num) : cfg_(std::move(cfg)), num_(std::move(num)) {}
  ~CudaRunnerV41() override;
  Status init(const runner::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return cfg_; }
  std::string name() const override;
  int32_t kv_elem_bytes() const override { return 4; }
  bool exact_math() const override { return exact_; }
  bool fp32_weights() const override { return weights_.fp32_storage(); }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  Status set_timing(bool on) override {
    timer_.set_enabled(on);
    return Status::ok();
  }
  Result<std::vector<OpTime>> op_times() override { return timer_.times(stream_); }
  Status randomize_state(uint64_t seed) override;

 private:
  struct Scratch {
    int64_t tokens = 0, rows = 0, stride = 0;
    cuda::DeviceBuffer<float> X, y, f, post, comb, onehot, pre_a, pre0, pre1, cq, q, kv, ckv, cg, latent, key, iq, iw,
        scores, blk, o, mid, router, rw, erows, ekv, hid, logits, attn_ws;
    cuda::DeviceBuffer<int32_t> sel, mask_n, ridx;
    cuda::DeviceBuffer<uint8_t> mask;
    cuda::DeviceBuffer<int64_t> hashes;
  };
  Status init_engram(const std::string& model_dir);
  // forward_v41_cuda.cpp
  Status ensure_scratch(int64_t T, int64_t R, int64_t max_pos);
  int64_t attention_splits(int64_t l, int64_t T) const;
  Status run_forward(const ops::StepDevice& st, const int32_t* rows, int64_t R);
  Status engram(int64_t l, const ops::StepDevice& st);
  Status ffn(int64_t l, const ops::StepDevice& st);
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy);
  // The kernel-choice plans' mode (ops/kernel_mode.h): exact, else the default kernels.
  ops::KernelMode kernel_mode() const { return exact_ ? ops::KernelMode::kExact : ops::KernelMode::kDefault; }
  Status mark(const char* name, int64_t layer, bool begin) { return timer_.mark(name, layer, begin, stream_); }
  // attention_v41_cuda.cpp
  Status attention(int64_t l, const ops::StepDevice& st);
  Status kv_source(int64_t l, const ops::StepDevice& st);
  Status index_source(int64_t l, const ops::StepDevice& st);

  io::ModelConfig cfg_;
  model::Numerics num_;
  cuda::DeviceInfo device_;
  void* stream_ = nullptr;
  DeviceWeightsV41 weights_;
  cuda::DeviceBuffer<float> inv_main_, inv_comp_;
  // Engram hashing: the layout's multipliers / primes / offsets and the compressed-vocabulary map on the device, the
  // map on the host too (token ids are checked against it before a step, as the CPU reference does).
  cuda::DeviceBuffer<int64_t> eh_mult_, eh_primes_, eh_offsets_;
  cuda::DeviceBuffer<int32_t> token_map_;
  std::vector<int32_t> token_map_host_;
  ops::cuda::EngramHashCudaParams hash_;
  cache::StateLayout layout_;
  cuda::DeviceBuffer<uint8_t> slots_, blocks_;
  int64_t max_model_len_ = 0;
  Scratch s_;
  int64_t max_pos_ = 0;
  ops::cuda::MoeWorkspace moe_ws_;
  StepPlanUpload plan_;
  bool exact_ = false;
  OpTimer timer_;
};

}  // namespace dsinfer::backends

// One named op of the V4.1 forward, bracketed by the op timer's events.
#define DSI_OP41(name, layer, ...)                  \
  do {                                              \
    DSI_RETURN_IF_ERROR(mark(name, layer, true));   \
    DSI_RETURN_IF_ERROR(__VA_ARGS__);               \
    DSI_RETURN_IF_ERROR(mark(name, layer, false));  \
  } while (0)
