// CudaForwardV41: the DeepSeek-V4.1 family's part of the CUDA runner (cuda_forward.h), op for op the CPU reference
// (model/deepseek_v41*.cpp) under transformers numerics (hf, hf-noqat). It shares the V4 kernels (embed, GEMM,
// RMSNorm / RoPE, mHC with the carried pre, MoE, sparse attention, ring write) and adds the CSA2 and Engram kernels
// (ops/csa2, ops/engram). Parts:
//   forward_v41_load_cuda.cpp  loading (weights, RoPE tables, the Engram hash tables), the state checks
//   forward_v41_cuda.cpp       the per-step forward (embed, Engram, mHC sites, MoE, final collapse, head), scratch
//   attention_v41_cuda.cpp     CSA2 attention (projections, KV-source emission, indexer, sparse attention)
//   device_weights_v41*        the weights on the GPU (exact fp32 upload or dummy weights)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/runner/cuda_forward.h"
#include "backends/cuda/weights/device_weights_v41.h"
#include "ops/engram/engram_launch.h"
#include "ops/moe/moe_cuda.h"

namespace dsinfer::backends {

class CudaForwardV41 final : public CudaForward {
 public:
  explicit CudaForwardV41(RunnerCore& core) : CudaForward(core) {}

  const char* family() const override { return "v4.1"; }
  Status load(const runner::RunnerOptions& opts, ExpertSlots slots) override;
  int64_t weight_bytes() const override { return weights_.bytes(); }
  bool fp32_storage() const override { return weights_.fp32_storage(); }
  Status bind_state() override;
  Status reset_invalid_state() override;
  Status check_plan(const scheduler::BatchPlan& plan) const override;
  Status prepare(int64_t T, int64_t R, int64_t max_pos) override;
  Status run(const ops::StepDevice& st, const int32_t* rows, int64_t R) override;
  float* logits() const override { return s_.logits.data(); }
  Result<int32_t> reload_expert_slots(int64_t l, const std::vector<int32_t>& slots) override;
  // No GPU drafter for V4.1 yet (CudaRunner::create_drafter refuses speculative decoding on it).
  const ops::cuda::DeviceWeight* embed_weight() const override { return nullptr; }
  const ops::cuda::DeviceWeight* head_weight() const override { return nullptr; }

 private:
  struct Scratch {
    int64_t tokens = 0, rows = 0, stride = 0;
    cuda::DeviceBuffer<float> X, y, f, post, comb, onehot, pre_a, pre0, pre1, cq, q, kv, ckv, cg, latent, key, iq, iw,
        scores, blk, o, mid, router, rw, erows, ekv, hid, logits, attn_ws;
    cuda::DeviceBuffer<int32_t> sel, mask_n, ridx;
    cuda::DeviceBuffer<uint8_t> mask;
    cuda::DeviceBuffer<int64_t> hashes;
  };
  // The kernel-choice plans' mode (ops/kernel_mode.h): exact, batch-invariant, else the default kernels.
  ops::KernelMode kernel_mode() const override {
    if (exact_) return ops::KernelMode::kExact;
    return batch_invariant_ ? ops::KernelMode::kBatchInvariant : ops::KernelMode::kDefault;
  }
  MoeLayerView moe_layer(int64_t l) const override {
    const float limit = float(cfg_.swiglu_limit);
    return {&weights_.layer(l).experts, &weights_.layer(l).shared, limit, limit};
  }
  Status init_engram(const std::string& model_dir);
  int64_t attention_splits(int64_t l, int64_t T) const;
  Status engram(int64_t l, const ops::StepDevice& st);
  Status ffn(int64_t l, const ops::StepDevice& st);
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy);
  // attention_v41_cuda.cpp
  Status attention(int64_t l, const ops::StepDevice& st);
  Status kv_source(int64_t l, const ops::StepDevice& st);
  Status index_source(int64_t l, const ops::StepDevice& st);

  DeviceWeightsV41 weights_;
  cuda::DeviceBuffer<float> inv_main_, inv_comp_;
  // Engram hashing: the layout's multipliers / primes / offsets and the compressed-vocabulary map on the device, the
  // map on the host too (token ids are checked against it before a step, as the CPU reference does).
  cuda::DeviceBuffer<int64_t> eh_mult_, eh_primes_, eh_offsets_;
  cuda::DeviceBuffer<int32_t> token_map_;
  std::vector<int32_t> token_map_host_;
  ops::cuda::EngramHashCudaParams hash_;
  Scratch s_;
  ops::cuda::MoeWorkspace moe_ws_;
};

}  // namespace dsinfer::backends
