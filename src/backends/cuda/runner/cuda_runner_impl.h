// CudaRunner: the CUDA ModelRunner. Internal to src/backends/cuda/; everything else reaches it through
// ModelRunner / create_cuda_runner. Its parts:
//   device_weights.h   weights on the GPU, bound to typed per-layer slots (checkpoint upload or dummy weights)
//   step_plan.h        the BatchPlan packed into one buffer, uploaded through pinned staging each step
//   decode_graphs.h    CUDA graphs of decode steps, one per batch size
//   forward_cuda.cpp   the per-step forward (embed, layers, head) over scratch sized for the largest step;
//   attention_cuda.cpp its attention block
//   op_timer.h         per-op event timing for `dsinfer bench` (RunnerDiagnostics)
//   device_sampler.h   buffers of device sampling (sampling_runner_cuda.cpp: ops/sampling on the logits)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/runner/device_sampler.h"
#include "backends/cuda/runner/host_tier_cuda.h"
#include "backends/cuda/step/decode_graphs.h"
#include "backends/cuda/step/op_timer.h"
#include "backends/cuda/step/step_plan.h"
#include "backends/cuda/weights/device_weights.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "model/numerics.h"
#include "model/state_pool.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/step_cuda.h"
#include "parallel/eplb.h"
#include "parallel/communicator.h"
#include "parallel/parallel_plan.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

class CudaRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  CudaRunner(io::ModelConfig cfg, model::Numerics num) : cfg_(std::move(cfg)), num_(std::move(num)) {}
  ~CudaRunner() override;
  Status init(const runner::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return cfg_; }
  std::string name() const override;
  int32_t kv_elem_bytes() const override { return 4; }
  bool exact_math() const override { return exact_; }
  bool fp32_weights() const override { return weights_.fp32_storage(); }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  // Device sampling (sampling_runner_cuda.cpp): the logits stay on the GPU, only sampled ids come back.
  bool supports_device_sampling() const override { return true; }
  Status begin_sampled_step(const scheduler::BatchPlan& plan) override;
  Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) override;
  // Asynchronous steps (same file): sampling in two halves over two buffer sets; token fills gathered on the device.
  bool supports_async_steps() const override { return true; }
  Status launch_sample_rows(const sampling::PackedRows& rows) override;
  Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) override;
  Status set_step_events(bool on) override;
  Result<StepGapTimes> step_gap_times() override;

  // Expert parallelism (parallel_runner.h): the communicator of this shard's EP group (the MoE output is summed
  // over it after every MoE), and whether the step computes and downloads logits (shard 0 only).
  void set_expert_comm(parallel::Communicator* comm) { comm_ = comm; }
  void set_compute_logits(bool on) { compute_logits_ = on; }
  int32_t device_ordinal() const { return ordinal_; }
  // EPLB (parallel_runner_eplb_cuda.cpp, docs/multi_gpu.md): the per-expert token counts of every MoE layer since
  // the last call ([layers * experts], counted on the device by rank 0 only; zeroed after reading), and a new
  // placement of every layer applied between steps (changed slots reloaded, tables uploaded; slots reloaded).
  Status eplb_take_counts(std::vector<uint32_t>& counts);
  Result<int32_t> eplb_apply(const std::vector<parallel::Placement>& layers);

  // Per-op timing for `dsinfer bench`: when on, every named op is bracketed by CUDA events.
  Status set_timing(bool on) override {
    timer_.set_enabled(on);
    return Status::ok();
  }
  Result<std::vector<OpTime>> op_times() override { return timer_.times(stream_); }
  Status randomize_state(uint64_t seed) override;
  // Prefix caching (prefix_cache_cuda.cpp): snapshots in device memory, host tier in pinned memory, copies on
  // the runner's stream.
  Status bind_snapshots(int32_t num_snapshots) override;
  Status bind_host_blocks(int32_t num_host_blocks) override;
  Status copy_state(std::span<const cache::StateCopy> copies) override;
  // Speculative decoding (hidden_capture_cuda.cpp): the tapped layers' residual streams of every token of a
  // step, kept on the device (captured_hidden_device) and downloaded to pinned host memory with the logits.
  Status set_hidden_capture(std::vector<int64_t> layers) override;
  std::span<const float> captured_hidden() const override { return hidden_view_; }
  // The GPU drafter (draft_cuda.h) on this runner's stream, embedding and head; DSINFER_DRAFTER=host keeps the
  // host drafter (captured states downloaded).
  Result<std::unique_ptr<speculative::Drafter>> create_drafter(const speculative::SpeculativeConfig& cfg,
                                                               int32_t num_slots) override;

 private:
  // Scratch of the forward, sized for the largest step seen (grown, never shrunk; growing starts a new scratch
  // generation, which drops the decode graphs).
  struct Scratch {
    int64_t tokens = 0;
    cuda::DeviceBuffer<float> attn_ws, X, y, f, post, comb, cq, q, kv, ckv, cg, iq, iw, ikv, ig, scores, o, mid, router,
        rw, hid, logits;
    cuda::DeviceBuffer<int32_t> sel, ridx;
  };
  // Shape facts of the current step that size the attention (set by step()).
  struct StepShape {
    int64_t max_pos = 0;  // largest position (fixed-shape steps: max_model_len - 1)
    int64_t visible = 0;  // compressed entries visible to the indexer at max_pos
  };

  // step(): pack the plan into pinned staging and copy it to the device (one copy on the stream).
  Status upload_plan(const scheduler::BatchPlan& plan, const StepPlanLayout& layout);
  // forward_cuda.cpp
  Status ensure_scratch(int64_t T, int64_t R, int64_t max_visible, int64_t max_pos);
  int64_t attention_splits(io::AttnType type, int64_t m, int64_t T, int64_t max_pos) const;
  // The kernels of one step (no host synchronisation, no allocation: capturable into a CUDA graph).
  Status run_forward(const ops::StepDevice& st, const int32_t* rows, int64_t R);
  Status ffn(int64_t l, const int32_t* tokens, int64_t T);
  // The kernel-choice plans' mode (ops/kernel_mode.h): exact, batch-invariant or fast.
  ops::KernelMode kernel_mode() const {
    if (exact_) return ops::KernelMode::kExact;
    return batch_invariant_ ? ops::KernelMode::kBatchInvariant : ops::KernelMode::kFast;
  }
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy, bool acc);
  Status gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w,
                      int64_t groups, float* y, int64_t ldy, int64_t yg);
  Status gemm_grouped_lt(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w,
                         int64_t groups, float* y, int64_t ldy, int64_t yg);
  Status moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k, const DeviceLayer& L);
  Status mark(const char* name, int64_t layer, bool begin) { return timer_.mark(name, layer, begin, stream_); }
  // sampling_runner_cuda.cpp: the step's token fills (after the plan upload); the pinned plan staging may only be
  // rewritten once the previous upload has left it (asynchronous steps pack step t+1 while step t may not have started).
  Status fill_plan_tokens(const StepPlanLayout& layout);
  int64_t prev_sample_rows() const;
  // attention_cuda.cpp
  Status attention(int64_t l, const ops::StepDevice& st);
  // hidden_capture_cuda.cpp: sizing (before the forward), the copy after layer l (inside it, capturable), the
  // download (after it, before the step's synchronisation).
  Status ensure_capture(int64_t T);
  Status capture_hidden(int64_t l, int64_t T);
  Status download_hidden(int64_t T);
  void free_capture();

  // EPLB state of this shard: the placement table of every layer ([layers * table_len] int32, remap_expert_eplb)
  // and the per-expert counters ([layers * experts] uint32, rank 0 only).
  struct EplbDevice {
    bool on = false;
    int32_t redundant = 0, slots = 0;
    int64_t table_len = 0;
    cuda::DeviceBuffer<int32_t> tables;
    cuda::DeviceBuffer<uint32_t> counts;
  };
  // The routed experts this shard loads: its range, or with EPLB the initial placement (tables and counters set up).
  Result<ExpertSlots> eplb_init(const runner::RunnerOptions& opts);
  Status eplb_upload_tables(const std::vector<parallel::Placement>& layers);
  // forward_cuda.cpp ffn: global top-k ids -> local slots (range or placement table).
  Status remap_experts(int64_t l, int64_t T, int64_t k);

  // Makes this runner's GPU current: every entry point that launches work calls it first, since the engine (or the
  // ParallelRunner) may call from a thread whose current device is another.
  Status bind_device() const;

  io::ModelConfig cfg_;
  model::Numerics num_;
  cuda::DeviceInfo device_;
  int32_t ordinal_ = 0;                  // RunnerOptions::device
  int32_t ep_rank_ = 0, ep_size_ = 1;    // expert parallelism (RunnerOptions::ep_rank / ep_size)
  parallel::ExpertRange experts_;        // routed experts held here (global ids)
  parallel::Communicator* comm_ = nullptr;  // EP group (ep_size_ > 1), owned by the ParallelRunner
  EplbDevice eplb_;
  bool compute_logits_ = true;
  void* stream_ = nullptr;
  DeviceWeights weights_;
  cuda::DeviceBuffer<float> inv_main_, inv_comp_;  // RoPE inverse frequencies (main / compressed layers)
  cache::StateLayout layout_;
  cuda::DeviceBuffer<uint8_t> slots_, blocks_;  // the engine's state memory (fp32 rows)
  cuda::DeviceBuffer<uint8_t> snapshots_;       // prefix caching: [num_snapshots, slot_bytes]
  PinnedHostBuffer host_blocks_;                // prefix-cache host tier: [num_host_blocks, block_bytes]
  int64_t max_model_len_ = 0;
  Scratch s_;
  StepShape shape_;
  ops::cuda::MoeWorkspace moe_ws_;
  uint64_t scratch_gen_ = 0;
  StepPlanUpload plan_;  // the step plan's pinned staging and device copy (step_plan.h)
  bool exact_ = false;            // GEMMs / MoE only on the fp32 CUDA-core path (RunnerOptions::exact_gemm)
  // RunnerOptions::batch_invariant: GEMM kernels and K splits chosen per weight (GemmPrecision::kBatchInvariant),
  // fixed attention split size, fixed mHC split, MoE never by T. No cuBLASLt in this mode.
  bool batch_invariant_ = false;
  bool graphs_enabled_ = true;    // DSINFER_CUDA_GRAPHS=0 turns decode graphs off
  // The GEMM environment overrides (DSINFER_CUBLASLT*), read once by init() (a bad value fails the runner's
  // creation); cuBLASLt runs the fast path's dense projections where plan_gemm_call says so (forward_cuda.cpp gemm).
  ops::cuda::GemmSettings gemm_settings_;
  std::optional<ops::cuda::GemmLtEngine> lt_;  // made by init() with gemm_settings_.lt_activations
  DecodeGraphs graphs_;
  OpTimer timer_;
  DeviceSamplerBuffers dsamp_;
  // Hidden-state capture: capture_index_[l] = position of layer l in the requested list, or -1.
  std::vector<int64_t> capture_layers_, capture_index_;
  cuda::DeviceBuffer<float> hidden_dev_;  // [tokens, layers, hc * D]
  float* hidden_host_ = nullptr;          // pinned, hidden_host_floats_ floats
  size_t hidden_host_floats_ = 0;
  size_t capture_floats_ = 0;     // floats captured by the last step
  bool download_hidden_ = true;   // false once a device drafter reads the capture in place
  std::span<const float> hidden_view_;
};

}  // namespace dsinfer::backends

// Runs one named op of the forward, bracketed by the op timer's events (forward_cuda.cpp, attention_cuda.cpp).
#define DSI_OP(name, layer, ...)                   \
  do {                                             \
    DSI_RETURN_IF_ERROR(mark(name, layer, true));  \
    DSI_RETURN_IF_ERROR(__VA_ARGS__);              \
    DSI_RETURN_IF_ERROR(mark(name, layer, false)); \
  } while (0)
