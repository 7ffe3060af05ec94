// CudaForwardV41: the DeepSeek-V4.1 family's part of the CUDA runner (cuda_forward.h), op for op the CPU reference
// (model/deepseek_v41*.cpp) under transformers numerics (hf, hf-noqat) and official numerics (every rounding point of
// model/deepseek_v41_numerics.h: bf16 activations, FP8 1x32 activation quantization before FP8 / FP4 GEMMs, bf16
// indexer scores with torch.topk's ties, the official attention and MoE; exact kernels). It shares the V4 kernels (embed, GEMM,
// RMSNorm / RoPE, mHC with the carried pre, MoE, sparse attention, ring write) and adds the CSA2 and Engram kernels
// (ops/csa2, ops/engram). Parts:
//   forward_v41_load_cuda.cpp  loading (weights, RoPE tables, the Engram hash tables), the state checks
//   forward_v41_cuda.cpp       the per-step forward (embed, Engram, mHC sites, MoE, final collapse, head), scratch
//   attention_v41_cuda.cpp     CSA2 attention (projections, KV-source emission, indexer, sparse attention)
//   device_weights_v41*        the weights on the GPU (exact fp32 upload or dummy weights)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/runner/cuda_forward.h"
#include "backends/cuda/weights/device_weights_v41.h"
#include "model/deepseek_v41_numerics.h"
#include "ops/engram/engram_launch.h"
#include "ops/gemm/gemm_lt_cuda.h"
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
  int32_t padding_token() const override;  // the first id of the Engram vocabulary
  Status prepare(int64_t T, int64_t R, int64_t max_pos) override;
  Status run(const ops::StepDevice& st, const int32_t* rows, int64_t R) override;
  float* logits() const override { return s_.logits.data(); }
  Result<int32_t> reload_expert_slots(int64_t l, const std::vector<int32_t>& slots) override;
  // No device drafter for V4.1 yet: CudaRunner::create_drafter leaves DSpark to the host reference drafter.
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
    cuda::DeviceBuffer<int64_t> pairs;  // official numerics: the indexer selection's (value, index) pairs [T, stride]
  };
  // The kernel-choice plans' mode (ops/kernel_mode.h): exact (also for official numerics, whose rounding points assume
  // the exact kernels' fp32 GEMMs), batch-invariant, else V4's fast path (cuBLASLt, the GEMV kernel, the fast and
  // grouped FP8 MoE, the tensor-core attention; docs/decisions.md 2026-12-03 "V4.1 on the fast path").
  ops::KernelMode kernel_mode() const override {
    if (exact_ || official()) return ops::KernelMode::kExact;
    return batch_invariant_ ? ops::KernelMode::kBatchInvariant : ops::KernelMode::kFast;
  }
  MoeLayerView moe_layer(int64_t l) const override {
    const float limit = float(cfg_.swiglu_limit);
    return {&weights_.layer(l).experts, &weights_.layer(l).shared, limit, limit};
  }
  bool official() const { return num_.bf16_activations; }
  // y [M, ldy] = x [M, ldx] . w^T with the semantics of `g` (model::v41::Num::linear): under official numerics the
  // official GEMM (ops/gemm/gemm_official_cuda.h: bit for bit Num::linear), otherwise the plain GEMM.
  Status linear(model::v41::Gemm g, const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y,
                int64_t ldy);
  // Official numerics: columns [c0, c1) of x [rows, ld] rounded to bf16 (a no-op otherwise).
  Status round(float* x, int64_t rows, int64_t ld, int64_t c0, int64_t c1);
  Status init_engram(const std::string& model_dir);
  int64_t attention_splits(int64_t l, int64_t T) const;
  Status engram(int64_t l, const ops::StepDevice& st);
  // The host placement (--engram-placement host): every Engram layer's rows gathered from pinned host memory on a
  // side stream of its own, started right after the hashes; engram() joins its layer's before the wkv GEMM.
  bool tables_on_host() const { return weights_.host_bytes() > 0; }
  Status fetch_engram_rows(const ops::StepDevice& st);
  Status ffn(int64_t l, const ops::StepDevice& st);
  // y = x . w^T through the plan of ops/gemm/gemm_plan.h (plan_gemm_call); in the fast mode cuBLASLt where it takes
  // the weight, and an FP8 weight of blocks cuBLASLt cannot scale (the release's 32 x 32) widened to bf16 first
  // (ops/gemm/gemm_widen_cuda.h). Any engine error falls back to the kernels.
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy);
  Status prepare_gemm(int64_t T);
  // The grouped projection (wo_a, `groups` groups) outside official numerics: the kernels of
  // plan_gemm_grouped_call, or one cuBLASLt call per BF16 group (gemm_widen_plan.h gemm_grouped_bf16_lt_wants).
  Status gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w, int64_t groups,
                      float* y, int64_t ldy, int64_t yg);
  // attention_v41_cuda.cpp
  Status attention(int64_t l, const ops::StepDevice& st);
  Status kv_source(int64_t l, const ops::StepDevice& st);
  Status index_source(int64_t l, const ops::StepDevice& st);
  // Debugging official numerics op by op: with DSINFER_V41_DUMP=<file> set when the runner loads, every named
  // intermediate of every step (rows x cols floats of a [rows, ld] device matrix, or int32 with i32) is appended to
  // the file (format: tests/gpu/v41_dump.h, which compares it with the CPU reference's taps). Off: one branch.
  Status dump(const char* name, int64_t l, const void* d, int64_t rows, int64_t cols, int64_t ld = 0, bool i32 = false);

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
  std::vector<ops::cuda::MoeSideStream> fetch_;  // one per Engram layer (the host placement)
  // The fast mode's GEMM settings (DSINFER_CUBLASLT*, read by prepare() once) and cuBLASLt engine, and the bf16
  // copy of the FP8 weight being widened (sized by prepare() for the largest such weight; one at a time, in stream
  // order).
  ops::cuda::GemmSettings gemm_settings_;
  std::optional<ops::cuda::GemmLtEngine> lt_;
  cuda::DeviceBuffer<uint16_t> widened_;
  std::string dump_path_;                        // DSINFER_V41_DUMP at load (empty: off)
};

}  // namespace dsinfer::backends
