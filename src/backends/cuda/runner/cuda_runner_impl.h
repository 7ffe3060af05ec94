// CudaRunner: the one CUDA ModelRunner of every model family. Internal to src/backends/cuda/; everything else
// reaches it through ModelRunner / create_cuda_runner. Its parts:
//   cuda_forward.h     the state shared with the family's forward (RunnerCore) and the forward's interface
//                      (CudaForward: tensor table and weight upload, state checks, scratch, the per-step forward);
//                      forward_v4.h (DeepSeek-V4) and forward_v41.h (DeepSeek-V4.1) implement it
//   step_plan.h        the BatchPlan packed into one buffer, uploaded through pinned staging each step
//   decode_graphs.h    CUDA graphs of decode steps, one per batch size
//   op_timer.h         per-op event timing for `dsinfer bench` (RunnerDiagnostics)
//   device_sampler.h   buffers of device sampling (sampling_runner_cuda.cpp: ops/sampling on the logits)
//   prefix_cache_cuda.cpp, hidden_capture_cuda.cpp, parallel_runner_eplb_cuda.cpp: state copies and the host tier,
//                      hidden-state capture and the GPU drafter, EPLB
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/runner/cuda_forward.h"
#include "backends/cuda/runner/device_sampler.h"
#include "backends/cuda/runner/host_tier_cuda.h"
#include "backends/cuda/step/decode_graphs.h"
#include "backends/cuda/step/group_step_graphs.h"
#include "backends/cuda/step/op_timer.h"
#include "backends/cuda/step/step_plan.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "model/numerics.h"
#include "ops/step_cuda.h"
#include "parallel/eplb.h"
#include "parallel/communicator.h"
#include "parallel/parallel_plan.h"
#include "runner/model_runner.h"

namespace dsinfer::backends {

class CudaRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics, private RunnerCore {
 public:
  CudaRunner(io::ModelConfig cfg, model::Numerics num) : RunnerCore(std::move(cfg), std::move(num)) {}
  ~CudaRunner() override;
  Status init(const runner::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return cfg_; }
  std::string name() const override;
  int32_t kv_elem_bytes() const override { return fwd_->state_elem_bytes(); }
  bool exact_math() const override { return exact_; }
  bool fp32_weights() const override { return fwd_->fp32_storage(); }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  // Device sampling (sampling_runner_cuda.cpp): the logits stay on the GPU, only sampled ids come back.
  bool supports_device_sampling() const override { return true; }
  Status begin_sampled_step(const scheduler::BatchPlan& plan) override;
  Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) override;
  // Chained verify steps (same file): begin_sampled_step with the fill kernel between the plan upload and the forward.
  bool supports_chained_steps() const override { return !dp_ && !tp_; }
  Status begin_chained_step(const scheduler::BatchPlan& plan, const speculative::RoundOutputs& round) override;
  // Asynchronous steps (same file): sampling in two halves over two buffer sets; token fills gathered on the device.
  bool supports_async_steps() const override { return true; }
  Status launch_sample_rows(const sampling::PackedRows& rows) override;
  Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) override;
  Status set_step_events(bool on) override;
  Result<StepGapTimes> step_gap_times() override;
  int64_t graphs_captured() const override { return graphs_.captures(); }
  // One rank with padded buckets and graphs on: graph_bucket_seqs of 1 .. max_seqs (step_plan.h).
  std::vector<int64_t> graph_batch_sizes(int64_t max_seqs) const override;
  double device_bytes_in_use() const override;

  // Expert parallelism (parallel_runner.h): the communicator of this shard's EP group (the MoE output is summed
  // over it after every MoE), and whether the step computes and downloads logits (shard 0 only).
  void set_expert_comm(parallel::Communicator* comm) { comm_ = comm; }
  void set_compute_logits(bool on) { compute_logits_ = on; }
  // DP attention + EP (docs/multi_gpu.md "DP attention"): this shard runs its own sequences (a step without
  // tokens still serves its experts to the other ranks), every MoE layer exchanges routed pairs with the others.
  void set_data_parallel(bool on) { dp_ = on; }
  // DP attention on ranks sharing one GPU, before each step: every rank's token count (RunnerCore::dp_rank_tokens_).
  void set_dp_rank_tokens(const std::vector<int64_t>& tokens) { dp_rank_tokens_ = tokens; }
  // DP attention with the group's decode graphs, before each step: the group's shape key (every rank's decode
  // shape; the same on every rank) or -1 (the step runs eagerly on every rank).
  void set_dp_group_key(int64_t key) { dp_group_key_ = key; }
  // TP attention + EP (RunnerCore::tp_): this shard runs the query heads of its wo_a output groups.
  void set_tensor_parallel(bool on) { tp_ = on; }
  // A group graphed as a whole (ranks sharing one GPU, in-process communicator): this shard's graph steps go
  // through `g` (owned by the ParallelRunner); decode graphs are otherwise off with expert parallelism.
  void set_group_graphs(GroupStepGraphs* g) {
    group_graphs_ = g;
    graphs_enabled_ = g != nullptr && graphs_env_;
  }
  // Asynchronous steps of a ParallelRunner's shards > 0 (EP / TP on one GPU, docs/multi_gpu.md): their token fills
  // read the ids `src` (shard 0, which alone samples) sampled last, after that sampling's event; same GPU only.
  void set_token_source(const CudaRunner* src) { token_src_ = src; }
  // The collective traffic since the last call (then reset).
  CommTraffic take_comm_traffic() override { return std::exchange(traffic_, CommTraffic{}); }
  // DP attention: `copies` (this shard's local slot and block ids) against its state and the snapshot / host-tier
  // pools every rank shares (owned by the ParallelRunner), on this shard's stream, waited for.
  Status copy_state_with_pools(std::span<const cache::StateCopy> copies, uint8_t* snapshots, int64_t num_snapshots,
                               uint8_t* host_blocks, int64_t num_host_blocks);
  // EP / TP (replicated state): `copies` against this shard's state and snapshots and the host tier the ranks share
  // (owned by the ParallelRunner), on this shard's stream, waited for.
  Status copy_state_with_host_tier(std::span<const cache::StateCopy> copies, uint8_t* host_blocks,
                                   int64_t num_host_blocks);
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
  // P/D export / import: the same runs as the CPU runner's (cache::plan_region_runs) on the stream, then a wait
  // (the caller's buffer is pageable host memory and is read or reused when the call returns).
  Status read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) override;
  Status write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) override;
  // Speculative decoding (hidden_capture_cuda.cpp): the tapped layers' residual streams of every token of a
  // step, kept on the device (captured_hidden_device) and downloaded to pinned host memory with the logits.
  Status set_hidden_capture(std::vector<int64_t> layers) override;
  std::span<const float> captured_hidden() const override { return hidden_view_; }
  // The GPU drafter (draft_cuda.h) on this runner's stream, embedding and head; DSINFER_DRAFTER=host keeps the
  // host drafter (captured states downloaded).
  Result<std::unique_ptr<speculative::Drafter>> create_drafter(const speculative::SpeculativeConfig& cfg,
                                                               int32_t num_slots) override;

 private:
  cache::StateMemory state_memory();  // prefix_cache_cuda.cpp: the state pools as cache/state_copy addresses them
  Status region_copies(std::span<const cache::StateRegion> regions, uint8_t* host, size_t bytes, cache::CopyRun::Dir dir);
  // step(): pack the plan into pinned staging and copy it to the device (one copy on the stream).
  Status upload_plan(const scheduler::BatchPlan& plan, const StepPlanLayout& layout);
  // sampling_runner_cuda.cpp: the step's token fills (after the plan upload); the pinned plan staging may only be
  // rewritten once the previous upload has left it (asynchronous steps pack step t+1 while step t may not have started).
  Status fill_plan_tokens(const StepPlanLayout& layout);
  int64_t prev_sample_rows() const;
  // Step events (set_step_events; same file): a step's start (its plan upload), its end (the logits download or the
  // sampling results' copy), and the sums of a step whose end event has completed. A sampled step records them in
  // begin_sampled_step / launch_sample_rows and sums them in wait_sample_rows; a plain step (logits to the host)
  // in step() itself, summed after its synchronisation.
  Status step_event_start();
  Status step_event_end();
  Status count_step_events();
  // hidden_capture_cuda.cpp: sizing (before the forward; the copy after each tapped layer is
  // RunnerCore::capture_hidden, inside the forward), the download (after it, before the step's synchronisation).
  Status ensure_capture(int64_t T);
  // The decode graph of a fixed-shape step of T tokens, S sequences, with or without the capture copies.
  int64_t graph_key(int64_t T, int64_t S) const;
  Status download_hidden(int64_t T);
  void free_capture();

  // The routed experts this shard loads: its range, or with EPLB the initial placement (tables and counters set up).
  Result<ExpertSlots> eplb_init(const runner::RunnerOptions& opts);
  Status eplb_upload_tables(const std::vector<parallel::Placement>& layers);

  // prefix_cache_cuda.cpp: the planned runs of `copies` against this runner's slots and blocks and the given
  // snapshot / host-tier pools, issued on the stream (not waited for).
  Status issue_copies(std::span<const cache::StateCopy> copies, uint8_t* snapshots, int64_t num_snapshots,
                      uint8_t* host_blocks, int64_t num_host_blocks);

  // Makes this runner's GPU current: every entry point that launches work calls it first, since the engine (or the
  // ParallelRunner) may call from a thread whose current device is another.
  Status bind_device() const;

  std::unique_ptr<CudaForward> fwd_;            // the model family's part (make_cuda_forward)
  bool compute_logits_ = true;
  cuda::DeviceBuffer<uint8_t> snapshots_;       // prefix caching: [num_snapshots, slot_bytes]
  PinnedHostBuffer host_blocks_;                // prefix-cache host tier: [num_host_blocks, block_bytes]
  StepPlanUpload plan_;  // the step plan's pinned staging and device copy (step_plan.h)
  bool graphs_enabled_ = true;    // DSINFER_CUDA_GRAPHS=0 turns decode graphs off
  bool graphs_env_ = true;        // DSINFER_CUDA_GRAPHS is not 0
  DecodeGraphs graphs_;
  GroupStepGraphs* group_graphs_ = nullptr;  // set_group_graphs
  int64_t dp_group_key_ = -1;                 // set_dp_group_key
  const CudaRunner* token_src_ = nullptr;    // set_token_source
  std::vector<int64_t> graph_capture_layers_;  // the tapped layers whose copies the capturing decode graphs hold
  // Graph buckets (step_plan.h graph_bucket_seqs): on one rank, a fixed-shape step runs padded to its bucket, graphed
  // or not (so both compute the same bits); DSINFER_CUDA_GRAPH_BUCKETS=0 runs every batch size at its own shape.
  bool buckets_enabled_ = true;
  StepPadding pad_;                         // bind_state: the slot and block reserved for padding sequences
  scheduler::BatchPlan padded_;             // step(): the plan padded to its bucket
  std::vector<cache::BlockId> pad_table_;   // padded_'s block table of the padding sequences
  DeviceSamplerBuffers dsamp_;
  float* hidden_host_ = nullptr;          // pinned, hidden_host_floats_ floats
  size_t hidden_host_floats_ = 0;
  size_t capture_floats_ = 0;     // floats captured by the last step
  int64_t scratch_tokens_ = 0;    // the token bucket the forward's scratch was last grown for (step())
  const speculative::RoundOutputs* chain_ = nullptr;  // begin_chained_step: step() fills the plan's tokens from it
  bool download_hidden_ = true;   // false once a device drafter reads the capture in place
  std::span<const float> hidden_view_;
};

}  // namespace dsinfer::backends

