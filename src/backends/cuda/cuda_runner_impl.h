// CudaRunner: the CUDA ModelRunner (weights, state memory, scratch, the per-step forward). Internal to
// src/backends/cuda/; everything else reaches it through ModelRunner / create_cuda_runner.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "model/deepseek_v4.h"
#include "model/weights.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "engine/model_runner.h"

namespace dsinfer::backends {

class CudaRunner final : public engine::ModelRunner, public engine::RunnerDiagnostics {
 public:
  CudaRunner(io::ModelConfig cfg, model::Numerics num) : cfg_(std::move(cfg)), num_(std::move(num)) {}
  ~CudaRunner() override;
  Status init(const engine::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return cfg_; }
  std::string name() const override;
  int32_t kv_elem_bytes() const override { return 4; }
  bool exact_math() const override { return exact_; }
  bool fp32_weights() const override { return fp32_weights_; }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  engine::RunnerDiagnostics& diagnostics() override { return *this; }

  // Per-op timing for `dsinfer bench`: when on, every named op is bracketed by CUDA events.
  Status set_timing(bool on) override {
    timing_ = on;
    return Status::ok();
  }
  Result<std::vector<OpTime>> op_times() override;
  Status randomize_state(uint64_t seed) override;
  int64_t weight_bytes() const { return weight_bytes_; }
  const cuda::DeviceInfo& device() const { return device_; }

 private:
  struct DevTensor {
    cuda::DeviceBuffer<uint8_t> data, scale;
    ops::cuda::DeviceWeight w;  // matrices
  };
  struct Hc {
    const float *fn = nullptr, *base = nullptr, *scale = nullptr;
  };
  struct DevLayer {
    const float *attn_norm = nullptr, *ffn_norm = nullptr, *sink = nullptr, *q_norm = nullptr, *kv_norm = nullptr;
    Hc hc_attn, hc_ffn;
    ops::cuda::DeviceWeight wq_a, wq_b, wkv, wo_a, wo_b;
    ops::cuda::DeviceWeight comp_wkv, comp_wgate, idx_wq_b, idx_wproj, idx_wkv, idx_wgate;
    const float *comp_ape = nullptr, *comp_norm = nullptr, *idx_ape = nullptr, *idx_norm = nullptr;
    ops::cuda::DeviceWeight gate;
    const float* gate_bias = nullptr;
    const int32_t* tid2eid = nullptr;
    ops::cuda::MoeExpertsDevice experts;
    bool has_shared = false;
    ops::cuda::MoeSharedDevice shared;
  };
  // Scratch sized for the largest step seen (grown, never shrunk).
  struct Scratch {
    int64_t tokens = 0, rows = 0, visible = 0, max_pos = 0;
    cuda::DeviceBuffer<uint8_t> attn_ws, X, y, f, post, comb, cq, q, kv, ckv, cg, iq, iw, ikv, ig, sel, scores, o, mid, router, ridx,
        rw, hid, logits, plan;
  };

  Status upload_resolved(const model::ResolvedTensor& r);
  Status make_dummy(const model::TensorSpec& spec, uint64_t seed);
  const DevTensor* find(const std::string& name) const;
  Status build_layers();
  Status ensure_scratch(int64_t T, int64_t R, int64_t max_visible, int64_t max_pos);
  int64_t attention_splits(io::AttnType type, int64_t m, int64_t T, int64_t max_pos) const;
  // The kernels of one step (no host synchronisation, no allocation: capturable into a CUDA graph).
  Status run_forward(const void* step_dev, const int32_t* rows, int64_t T, int64_t R);
  void drop_graphs();
  Status attention(int64_t l, const void* step_dev);
  Status ffn(int64_t l, const int32_t* tokens, int64_t T);
  Status mark(const char* name, int64_t layer, bool begin);
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy, bool acc,
              void* stream);
  Status gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w, int64_t groups,
                      float* y, int64_t ldy, int64_t yg, void* stream);
  Status moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k, const ops::cuda::MoeExpertsDevice& e,
             const ops::cuda::MoeSharedDevice* shared, float limit, float shared_limit, float* out,
             ops::cuda::MoeWorkspace& ws, void* stream);

  io::ModelConfig cfg_;
  model::Numerics num_;
  cuda::DeviceInfo device_;
  void* stream_ = nullptr;
  std::map<std::string, DevTensor> tensors_;
  std::vector<cuda::DeviceBuffer<uint8_t>> pointer_blobs_;
  int64_t weight_bytes_ = 0;
  bool fp32_weights_ = true;
  const DevTensor* embed_ = nullptr;
  ops::cuda::DeviceWeight head_;
  const float* final_norm_ = nullptr;
  Hc hc_head_;
  std::vector<DevLayer> layers_;
  std::vector<float> inv_main_, inv_comp_;
  cuda::DeviceBuffer<uint8_t> inv_main_dev_, inv_comp_dev_;
  cache::StateLayout layout_;
  cuda::DeviceBuffer<uint8_t> slots_, blocks_;
  Scratch s_;
  ops::cuda::MoeWorkspace moe_ws_;
  // Pinned host staging of the step plan (one async copy per step; page-locked so it overlaps and stays
  // valid while the copy is in flight).
  uint8_t* plan_host_ = nullptr;
  size_t plan_host_bytes_ = 0;
  int64_t T_ = 0;
  bool timing_ = false;
  bool exact_ = false;  // GEMMs / MoE only on the fp32 CUDA-core path (RunnerOptions::exact_gemm)
  int64_t max_model_len_ = 0;
  // Decode steps (one new token per sequence) replay a CUDA graph per batch size; scratch buffers are sized
  // for max_model_len so the captured pointers and launch shapes stay valid. Any reallocation drops them.
  bool graphs_enabled_ = true;          // DSINFER_CUDA_GRAPHS=0 turns them off
  std::map<int64_t, void*> graphs_;     // batch size -> cudaGraphExec_t
  uint64_t scratch_gen_ = 0, graphs_gen_ = 0;
  std::map<std::pair<std::string, int64_t>, std::pair<void*, void*>> events_;
  std::vector<std::pair<std::string, int64_t>> order_;
};

}  // namespace dsinfer::backends
