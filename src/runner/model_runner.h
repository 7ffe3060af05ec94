// ModelRunner: the seam between the engine (host logic, no CUDA) and a compute backend, below both (the engine's
// runner_factory.h is the one place that names the backends). A runner owns the model weights and the memory of
// the per-sequence state (laid out by the engine's cache::StateLayout) and turns one BatchPlan into logits. Implementations: src/backends/cpu (reference), src/backends/cuda.
// RunnerDiagnostics holds what only check-reference and bench use (timing, random state, precision facts);
// the engine never calls it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/state_cache.h"
#include "core/status.h"
#include "io/config.h"
#include "model/engram_placement.h"
#include "model/numerics.h"
#include "sampling/row_pack.h"
#include "scheduler/batch_plan.h"
#include "speculative/drafter.h"
#include "speculative/speculative_config.h"

namespace dsinfer::runner {

enum class Backend { kCpu, kCuda };
enum class LoadFormat { kAuto, kDummy };
Result<Backend> parse_backend(const std::string& name);
Result<LoadFormat> parse_load_format(const std::string& name);

struct RunnerOptions {
  std::string model_dir;
  Backend backend = Backend::kCpu;
  model::Numerics numerics = model::Numerics::official();
  LoadFormat load_format = LoadFormat::kAuto;  // kDummy: random weights in the storage formats (cuda only)
  int64_t num_layers = 0;                      // > 0: run only the first N layers (dummy weights; benchmarks)
  bool exact_gemm = false;                     // cuda: fp32 CUDA-core GEMMs only (check-reference's default)
  // cuda: every kernel's reduction order independent of the batch (docs/kernels.md "Batch invariance"); the cpu
  // runner is invariant already and ignores it.
  bool batch_invariant = false;
  // cuda, DeepSeek-V4 with `official` numerics outside exact mode and 512-wide rows: keep the state in DeepSeek's
  // storage format (FP8 rows, cache::kFp8StateElem; the default, EngineOptions::state_format "auto") instead of fp32
  // rows (the simulation path; false: "fp32").
  bool fp8_state = true;
  // Several GPUs of one node (docs/multi_gpu.md): gpus > 1 makes a ParallelRunner of `gpus` CudaRunner shards
  // with expert parallelism (expert_parallel_size 0 = gpus; it must equal gpus for now, and data / tensor
  // parallel sizes must be 1). cuda only.
  int32_t gpus = 1, expert_parallel_size = 0, data_parallel_size = 1, tensor_parallel_size = 1;
  // Set by the ParallelRunner for each shard: its CUDA device and its rank of the expert-parallel group (the
  // routed experts [rank * E / size, (rank + 1) * E / size)).
  int32_t device = 0, ep_rank = 0, ep_size = 1;
  // Expert-parallel load balancing (docs/multi_gpu.md "EPLB"), gpus > 1: num_redundant_experts extra expert slots
  // (a multiple of gpus), the placement recomputed from measured loads every eplb_interval steps.
  bool eplb = false;
  int32_t num_redundant_experts = 0;
  int64_t eplb_interval = 1000;
  // gpus > 1 (docs/multi_gpu.md "Communicators"): "auto" (NCCL with one GPU per rank; the in-process group when
  // ranks share a GPU, on the cpu backend, and for --batch-invariant with more than 2 GPUs, which needs a fixed
  // reduction order), "nccl" or "in-process". With "in-process" on cuda, rank r runs on GPU r % (visible GPUs).
  std::string communicator = "auto";
  int64_t collective_timeout_ms = 300000;  // every blocking wait of the ranks ends by then (a failure, not a hang)
  std::string fault_injection;             // test only: parallel/fault_injection.h
  // DeepSeek-V4.1's Engram tables (model/engram_rows.h): a full copy per rank (kDevice), in host memory with each
  // step's rows fetched behind the layers before them (kHost: cpu and cuda), or their rows split over the ranks
  // (kSharded). Refused for a model without Engram tables.
  model::EngramPlacement engram_placement = model::EngramPlacement::kDevice;
};

// RunnerOptions with the names of the user's options parsed: backend "cpu" | "cuda", numerics "official" | "hf",
// load format "auto" | "dummy"; the other fields keep their defaults.
Result<RunnerOptions> runner_options(const std::string& model_dir, const std::string& backend,
                                     const std::string& numerics, const std::string& load_format = "auto");

class RunnerDiagnostics {
 public:
  virtual ~RunnerDiagnostics() = default;
  // True when the GEMMs run in fp32 (CPU; CUDA with exact_gemm): no bf16 tensor-core rounding.
  virtual bool exact_math() const = 0;
  // True when every float weight was stored as F32 (no bf16/fp8/fp4 rounding in the checkpoint).
  virtual bool fp32_weights() const = 0;

  struct OpTime {
    std::string name;
    int64_t layer;  // -1: not per layer
    float ms;
  };
  // Per-op event timing of each step (bench); the default says the backend has none.
  virtual Status set_timing(bool on) { return Status::error("this backend has no per-op timing"); }
  // Times of every named op of the last step, in execution order.
  virtual Result<std::vector<OpTime>> op_times() { return Status::error("this backend has no per-op timing"); }
  // Fills the bound state memory with small random values, so decode can be timed at a context length
  // without prefilling it first.
  virtual Status randomize_state(uint64_t seed) { return Status::error("this backend cannot randomize its state"); }

  // Device idle time between steps (bench): while on, the runner records an event when a step's device work
  // starts (its plan upload) and when it ends (its logits download or sampling results); step_gap_times() sums,
  // over the steps since it was switched on, busy = end - start of each step and idle = start of a step - end of
  // the step before, in milliseconds.
  struct StepGapTimes {
    int64_t steps = 0;
    double busy_ms = 0, idle_ms = 0;
  };
  virtual Status set_step_events(bool on) { return Status::error("this backend has no step events"); }
  // Collectives of several ranks (bench, docs/multi_gpu.md): payload bytes every rank sent (a rank's own share
  // included: it goes through the collective too), collectives called, summed over the ranks since the last call
  // (then reset). One rank: all zero.
  struct CommTraffic {
    int64_t bytes = 0, calls = 0;
  };
  virtual CommTraffic take_comm_traffic() { return {}; }
  virtual Result<StepGapTimes> step_gap_times() { return Status::error("this backend has no step events"); }
  // Step graphs (CUDA graphs of fixed-shape steps) captured so far; 0 for a backend without them.
  virtual int64_t graphs_captured() const { return 0; }
  // Bytes in use on this runner's GPU now (total - free, every allocation of the process on it; the largest over its
  // GPUs for several ranks), or -1 for a backend without a device. `dsinfer bench` reports the largest value seen.
  virtual double device_bytes_in_use() const { return -1.0; }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual std::string name() const = 0;
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
  virtual RunnerDiagnostics& diagnostics() = 0;
  // ok, or why this runner can run no more steps (a rank of a parallel runner failed: every later call fails
  // with this reason; the engine's users report it, the server answers 503 with it).
  virtual Status health() const { return Status::ok(); }
  // DP attention (docs/multi_gpu.md): the number of ranks the state is split over (cache::StateCache::set_ranks);
  // bind_state then receives the whole id space and each rank holds its equal part. 1: one state.
  virtual int32_t state_ranks() const { return 1; }

  // The batch sizes whose fixed-shape steps (decode, uniform verify) replay one CUDA graph each, for batches of up
  // to max_seqs sequences: a batch runs padded to the smallest of them that holds it. Empty where this runner
  // captures no step graphs, or captures one per batch size (several ranks, graphs off); the engine's graph
  // warm-up (engine/graph_warmup.h) then runs nothing.
  virtual std::vector<int64_t> graph_batch_sizes(int64_t max_seqs) const { return {}; }

  // Speculative decoding (src/speculative): from now on every step() also keeps the output residual streams of these
  // target layers for every token of the step, readable until the next step() as captured_hidden():
  // [plan.num_tokens(), layers.size(), hc_mult * hidden_size] floats in plan token order. Empty = off.
  virtual Status set_hidden_capture(std::vector<int64_t> layers) {
    return layers.empty() ? Status::ok() : Status::error(name() + ": this backend cannot capture hidden states");
  }
  virtual std::span<const float> captured_hidden() const { return {}; }
  // The drafter of `cfg.method` on this backend's device, reading the captured hidden states where they are (the
  // runner then stops downloading them: captured_hidden() stays empty); nullptr = the engine's host drafter.
  virtual Result<std::unique_ptr<speculative::Drafter>> create_drafter(const speculative::SpeculativeConfig& cfg,
                                                                       int32_t num_slots) {
    return std::unique_ptr<speculative::Drafter>();
  }

  // Device sampling (ops/sampling): begin_sampled_step() runs the plan like step() but leaves the logits on the
  // device; sample_rows() then samples the rows `rows` describes (sampling/row_pack.h, pointing into those logits)
  // and returns one result per row, so only sampled ids and requested logprobs cross to the host. The host
  // Sampler stays the reference: runners without device sampling (CPU) return logits from step().
  virtual bool supports_device_sampling() const { return false; }
  virtual Status begin_sampled_step(const scheduler::BatchPlan& plan) {
    return Status::error(name() + ": this backend cannot sample on the device");
  }
  virtual Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) {
    return Status::error(name() + ": this backend cannot sample on the device");
  }
  // The chained verify step (docs/decisions.md, 2026-12-07): begin_sampled_step() of a fixed-shape verify plan
  // launched before the host has read the speculative round queued before it. Each sequence's start_pos in `plan`
  // is the round's; the device moves it past the round (1 + the accepted drafts) and writes its tokens (the round's
  // next token, then its drafts) and positions first. Every sequence must still fit max_model_len and its block
  // table after moving 1 + round.block positions. The engine adopts the launched step when the host's plan after
  // the round equals it; otherwise the step's writes are those of a verify whose drafts were all rejected.
  virtual bool supports_chained_steps() const { return false; }
  virtual Status begin_chained_step(const scheduler::BatchPlan& plan, const speculative::RoundOutputs& round) {
    return Status::error(name() + ": this backend has no chained verify steps");
  }
  // Asynchronous steps (docs/engine_core.md): sample_rows() split in two so that the host plans the next step
  // while the device runs this one. launch_sample_rows() queues the sampling of `rows` after the forward of the
  // last begin_sampled_step() and returns at once (the rows are copied); wait_sample_rows() waits for the oldest
  // launched sampling not yet waited for and returns its results. A begin_sampled_step() plan may then carry
  // BatchPlan::token_fills: its kPendingToken inputs are taken on the device from the ids of the most recent
  // launch_sample_rows() (an id that is not a valid token, e.g. of a non-finite row, becomes token 0: that
  // sequence is failed and its surplus step discarded). At most two launched samplings are outstanding.
  // A wrapping runner forwards all three.
  virtual bool supports_async_steps() const { return false; }
  virtual Status launch_sample_rows(const sampling::PackedRows& rows) {
    return Status::error(name() + ": this backend has no asynchronous steps");
  }
  virtual Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) {
    return Status::error(name() + ": this backend has no asynchronous steps");
  }

  // Prefix caching (cache/prefix_cache.h): room for `num_snapshots` copies of one slot (after bind_state), and
  // the state copies the engine asks for between steps, done in order before the next step() reads the state
  // (slot <-> snapshot for exact hits, block -> block and zeroed slots for bounded replay). Ids are checked.
  virtual Status bind_snapshots(int32_t num_snapshots) {
    return num_snapshots == 0 ? Status::ok() : Status::error(name() + ": this backend has no prefix-cache snapshots");
  }
  // Host tier: room for `num_host_blocks` blocks in host memory (pinned on CUDA) that kBlockToHost /
  // kHostToBlock copies spill evicted blocks to and restore them from.
  virtual Status bind_host_blocks(int32_t num_host_blocks) {
    return num_host_blocks == 0 ? Status::ok() : Status::error(name() + ": this backend has no prefix-cache host tier");
  }
  virtual Status copy_state(std::span<const cache::StateCopy> copies) {
    return copies.empty() ? Status::ok() : Status::error(name() + ": this backend cannot copy state");
  }
  // P/D disaggregation (Engine::export_prefix_state / import_prefix_state, cache/state_blob.h): whole token blocks
  // and snapshots (the engine's ids) to `out` / from `in`, packed back to back in region order, ordered after every
  // step and state copy issued before. Ids and the buffer's length are checked.
  virtual Status read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) {
    return Status::error(name() + ": this backend cannot export prefix state");
  }
  virtual Status write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) {
    return Status::error(name() + ": this backend cannot import prefix state");
  }
};

}  // namespace dsinfer::runner
