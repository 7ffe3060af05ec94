// The CUDA backend on one GPU: one runner for every model family (DeepSeek-V4 and V4.1), the family's tensor
// table, weight upload and forward supplied by its CudaForward (cuda_forward.h). The per-sequence state lives in
// device memory laid out by the engine's cache::StateLayout (fp32 rows). This file: the config (layer subset,
// checks), creation, state binding and the step (plan upload, graph or direct forward, logits download); the parts
// are listed in cuda_runner_impl.h.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/runner/cuda_config.h"
#include "backends/cuda/runner/cuda_runner.h"
#include "backends/cuda/runner/cuda_runner_impl.h"
#include "backends/cuda/runner/forward_v4.h"
#include "backends/cuda/runner/forward_v41.h"
#include "cuda/cuda_common.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "ops/token_fill/token_fill_cuda.h"

namespace dsinfer::backends {

std::unique_ptr<CudaForward> make_cuda_forward(RunnerCore& core) {
  if (core.cfg_.is_v41()) return std::make_unique<CudaForwardV41>(core);
  return std::make_unique<CudaForwardV4>(core);
}

Status CudaForward::sync() const {
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Result<io::ModelConfig> cuda_model_config(const runner::RunnerOptions& opts) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(opts.model_dir));
  // A profile the family's GPU forward cannot run is refused here, by name, never swapped for another.
  if (const std::string why = cuda_numerics_refusal(cfg, opts.numerics, opts.gpus); !why.empty())
    return Status::errorf("{}: {}", opts.model_dir, why);
  if (opts.num_layers > 0) {
    if (opts.load_format != runner::LoadFormat::kDummy) return Status::error("a layer subset needs dummy weights (a checkpoint has all its layers)");
    if (opts.num_layers > cfg.num_hidden_layers)
      return Status::errorf("{} layers requested, but the model has only {}", opts.num_layers, cfg.num_hidden_layers);
    keep_first_layers(cfg, opts.num_layers);
  }
  DSI_RETURN_IF_ERROR(model::check_engram_placement(cfg, opts.engram_placement, opts.model_dir));
  // Several GPUs: validated here, where the visible device count is known (docs/multi_gpu.md); with no device at
  // all, query_device says so when the runner starts.
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    (void)cudaGetLastError();
    visible = 0;
  }
  // In-process ranks may share GPUs (rank r on GPU r % visible): only NCCL needs one GPU per rank.
  const bool shared = opts.communicator == "in-process";
  DSI_RETURN_IF_ERROR(parallel::validate_parallel({opts.gpus, opts.expert_parallel_size, opts.data_parallel_size,
                                                   opts.tensor_parallel_size},
                                                  parallel::torchrun_env(), visible > 0 && !shared ? visible : -1)
                          .status());
  return cfg;
}

Result<std::unique_ptr<runner::ModelRunner>> create_cuda_runner(const runner::RunnerOptions& opts) {
  if (opts.gpus > 1)
    return Status::errorf("--gpus {}: several GPUs run in the ParallelRunner (create_parallel_runner)", opts.gpus);
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, cuda_model_config(opts));
  std::unique_ptr<CudaRunner> r(new CudaRunner(cfg, opts.numerics));
  DSI_RETURN_IF_ERROR(r->init(opts));
  return std::unique_ptr<runner::ModelRunner>(std::move(r));
}

Status CudaRunner::init(const runner::RunnerOptions& opts) {
  exact_ = opts.exact_gemm;
  batch_invariant_ = opts.batch_invariant;
  ordinal_ = opts.device;
  ep_rank_ = opts.ep_rank;
  ep_size_ = opts.ep_size;
  DSI_ASSIGN_OR_RETURN(experts_, parallel::expert_range(cfg_.n_routed_experts, ep_rank_, ep_size_));
  if (const char* g = std::getenv("DSINFER_CUDA_GRAPHS")) graphs_env_ = std::string(g) != "0";
  fp8_state_ = opts.fp8_state;
  // With expert parallelism a shard's decode graphs are its group's (set_group_graphs; docs/multi_gpu.md).
  graphs_enabled_ = graphs_env_ && ep_size_ <= 1;
  if (const char* b = std::getenv("DSINFER_CUDA_GRAPH_BUCKETS")) buckets_enabled_ = std::string(b) != "0";
  DSI_ASSIGN_OR_RETURN(device_, cuda::query_device(ordinal_));  // also makes it the current device
  // (EPLB: options checked and the redundant expert slots counted.)
  DSI_ASSIGN_OR_RETURN(ExpertSlots slots, eplb_init(opts));
  DSI_CUDA_TRY(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(&stream_), cudaStreamNonBlocking));
  fwd_ = make_cuda_forward(*this);
  DSI_RETURN_IF_ERROR(fwd_->load(opts, std::move(slots)));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaRunner::bind_device() const {
  DSI_CUDA_TRY(cudaSetDevice(ordinal_));
  return Status::ok();
}

double CudaRunner::device_bytes_in_use() const {
  size_t free_b = 0;
  size_t total_b = 0;
  if (bind_device() && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return double(total_b - free_b);
  (void)cudaGetLastError();
  return -1.0;
}

CudaRunner::~CudaRunner() {
  (void)cudaSetDevice(ordinal_);  // frees and destroys on this runner's GPU
  graphs_.clear();
  free_capture();
  fwd_.reset();  // its buffers before the stream
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

std::string CudaRunner::name() const {
  const std::string ep = !(ep_size_ > 1) ? ""
                         : eplb_.on ? fmt::format(", GPU {}, EPLB {} expert slots", ordinal_, eplb_.slots)
                                    : fmt::format(", GPU {}, experts [{}, {})", ordinal_, experts_.lo, experts_.hi);
  const std::string family = fwd_->family() == std::string("v4") ? "" : fmt::format("DeepSeek-{}, ", fwd_->family());
  const std::string state = fwd_->state_elem_bytes() == cache::kFp8StateElem ? ", FP8 state" : "";
  return fmt::format("cuda ({}{}, {} numerics, {:.2f} GiB weights{}{}{})", family, device_.name, num_.name,
                     double(fwd_->weight_bytes()) / double(1 << 30), state, batch_invariant_ ? ", batch-invariant" : "",
                     ep);
}

Status CudaRunner::randomize_state(uint64_t seed) {
  DSI_RETURN_IF_ERROR(bind_device());
  // Small values like real normalized KV rows; frontier gates included (any finite value is valid there).
  const ops::cuda::DummySpec unit{ops::cuda::DummyFill::Uniform, false, 0.0f, 1.0f};
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(slots_.data(), slots_.bytes() / 4, unit, seed, stream_));
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(blocks_.data(), blocks_.bytes() / 4, unit, seed + 1, stream_));
  DSI_RETURN_IF_ERROR(fwd_->reset_invalid_state());
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) {
  DSI_RETURN_IF_ERROR(bind_device());
  max_model_len_ = max_model_len;
  graphs_.clear();
  if (layout.kv_elem_bytes != 4 && layout.kv_elem_bytes != fwd_->state_elem_bytes())
    return Status::errorf("cuda runner: state layout with kv_elem_bytes {}, expected 4 or {}", layout.kv_elem_bytes,
                          fwd_->state_elem_bytes());
  layout_ = layout;
  // One slot and one block beyond the engine's hold the padding sequences of bucketed steps (zeroed: a padding
  // sequence starts at position 0 and reads only what it writes).
  const bool padding = buckets_enabled_ && ep_size_ <= 1;
  const size_t slot_bytes = size_t(layout.slot_bytes), block_bytes = size_t(layout.block_bytes);
  DSI_RETURN_IF_ERROR(slots_.alloc((size_t(num_slots) + (padding ? 1 : 0)) * slot_bytes, "state slots"));
  DSI_RETURN_IF_ERROR(blocks_.alloc((size_t(num_blocks) + (padding ? 1 : 0)) * block_bytes, "state blocks"));
  pad_ = {};
  if (padding) {
    cudaStream_t cs = static_cast<cudaStream_t>(stream_);
    DSI_CUDA_TRY(cudaMemsetAsync(slots_.data() + size_t(num_slots) * slot_bytes, 0, slot_bytes, cs));
    DSI_CUDA_TRY(cudaMemsetAsync(blocks_.data() + size_t(num_blocks) * block_bytes, 0, block_bytes, cs));
    pad_ = StepPadding{cache::SlotId(num_slots), cache::BlockId(num_blocks), fwd_->padding_token()};
  }
  return fwd_->bind_state();
}

Status CudaRunner::upload_plan(const scheduler::BatchPlan& plan, const StepPlanLayout& layout) {
  bool moved = false;
  DSI_RETURN_IF_ERROR(plan_.upload(plan, layout, stream_, &moved));
  if (moved) ++scratch_gen_;  // captured graphs hold the old plan pointers
  return Status::ok();
}

std::vector<int64_t> CudaRunner::graph_batch_sizes(int64_t max_seqs) const {
  std::vector<int64_t> sizes;
  if (pad_.slot < 0 || dp_ || tp_ || !graphs_enabled_ || timer_.enabled()) return sizes;
  for (int64_t n = 1; n <= max_seqs; ++n)
    if (sizes.empty() || graph_bucket_seqs(n) != sizes.back()) sizes.push_back(graph_bucket_seqs(n));
  return sizes;
}

Status CudaRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  if (!slots_.data()) return Status::error("cuda runner: bind_state was not called");
  DSI_RETURN_IF_ERROR(bind_device());
  timer_.begin_step();
  // Shards other than 0 of a ParallelRunner run the layers only (their logits would be shard 0's).
  const int64_t T = plan.num_tokens(), R = compute_logits_ ? plan.num_logits() : 0;
  const int64_t V = cfg_.vocab_size;
  hidden_view_ = {};
  // DP attention: a step without tokens still serves the other ranks' pairs, inside the group's graph when the
  // group's step is graphed (every rank's stream is in the one capture).
  const bool dp_graph = dp_ && dp_group_key_ >= 0 && group_graphs_ && graphs_enabled_ && !timer_.enabled();
  if (T == 0 && dp_graph)
    return group_graphs_->launch(dp_group_key_, scratch_gen_, stream_, [&] { return fwd_->serve_experts(); });
  if (T == 0) return dp_ ? fwd_->serve_experts() : Status::ok();
  DSI_RETURN_IF_ERROR(fwd_->check_plan(plan));
  // A decode step, or a verify step of the same 1 + k tokens per sequence, replays a CUDA graph of its shape. It
  // is laid out for max_model_len (split counts and scratch follow max_pos) whether or not it is graphed, so graphs
  // on or off (DSINFER_CUDA_GRAPHS, per-op timing) compute the same bits. On one rank it runs padded to its graph
  // bucket: the padding sequences come after the plan's, so the first T tokens and R logits rows are the plan's.
  const bool fixed = fixed_shape_step(plan, layout_, max_model_len_);
  const bool graph = dp_ ? dp_graph : fixed && graphs_enabled_ && !timer_.enabled();
  if (dp_graph && !fixed) return Status::error("cuda runner: a DP group graph step of a shape that is not fixed");
  const int64_t bucket = fixed ? graph_bucket_seqs(plan.num_seqs()) : plan.num_seqs();
  const bool pad = pad_.slot >= 0 && !dp_ && !tp_ && bucket > plan.num_seqs();
  if (pad) pad_fixed_step(plan, bucket, pad_, layout_.block_size, pad_table_, padded_);
  const scheduler::BatchPlan& run_plan = pad ? padded_ : plan;
  const int64_t run_T = run_plan.num_tokens(), run_R = compute_logits_ ? run_plan.num_logits() : 0;
  DSI_ASSIGN_OR_RETURN(const StepPlanLayout layout, layout_step_plan(run_plan, layout_, V, fixed, max_model_len_,
                                                                         prev_sample_rows()));
  // A prefill or mixed step grows the scratch for its token bucket first (decode_graphs.h scratch_tokens), then
  // exactly. A fixed-shape step keeps exact sizes: its max_pos is max_model_len, where a bucket's split workspace
  // could be large, and its shapes are the few graph buckets.
  if (!fixed && run_T > scratch_tokens_) {
    scratch_tokens_ = scratch_tokens(run_T);
    DSI_RETURN_IF_ERROR(fwd_->prepare(scratch_tokens_, std::max<int64_t>(run_R, 1), layout.max_pos));
  }
  DSI_RETURN_IF_ERROR(fwd_->prepare(run_T, std::max<int64_t>(run_R, 1), layout.max_pos));
  DSI_RETURN_IF_ERROR(ensure_capture(run_T));
  // A plain step (logits to the host) records its own step events; a sampled one's are begin_sampled_step's.
  const bool plain = !dsamp_.defer_logits;
  if (plain) DSI_RETURN_IF_ERROR(step_event_start());
  DSI_RETURN_IF_ERROR(upload_plan(run_plan, layout));
  DSI_RETURN_IF_ERROR(fill_plan_tokens(layout));  // asynchronous steps: inputs sampled by the step before
  if (chain_) {  // a chained verify step: its sequences' tokens and positions follow the round queued before it
    uint8_t* d = plan_.device();
    DSI_RETURN_IF_ERROR(ops::cuda::fill_chained_step(
        reinterpret_cast<int32_t*>(d + layout.tokens), reinterpret_cast<int64_t*>(d + layout.pos),
        reinterpret_cast<int64_t*>(d + layout.start_pos), plan.num_seqs(), plan.num_tokens() / plan.num_seqs(),
        chain_->accepted, chain_->verified, chain_->drafts, chain_->block, stream_));
  }
  const ops::StepDevice st = step_device(layout, plan_.device());
  const int32_t* rows = logits_rows(layout, plan_.device());
  if (graph && group_graphs_)
    DSI_RETURN_IF_ERROR(group_graphs_->launch(dp_ ? dp_group_key_ : graph_key(run_T, run_plan.num_seqs()),
                                              scratch_gen_, stream_, [&] { return fwd_->run(st, rows, run_R); }));
  else if (graph)
    DSI_RETURN_IF_ERROR(graphs_.launch(graph_key(run_T, run_plan.num_seqs()), scratch_gen_, stream_,
                                       [&] { return fwd_->run(st, rows, run_R); }));
  else
    DSI_RETURN_IF_ERROR(fwd_->run(st, rows, run_R));
  if (dsamp_.defer_logits) return Status::ok();  // begin_sampled_step: sample_rows() reads them on the device
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  logits.resize(size_t(R) * size_t(V));
  if (R > 0) DSI_CUDA_TRY(cudaMemcpyAsync(logits.data(), fwd_->logits(), size_t(R * V) * 4, cudaMemcpyDeviceToHost, cs));
  DSI_RETURN_IF_ERROR(download_hidden(T));
  DSI_RETURN_IF_ERROR(step_event_end());
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  return plain ? count_step_events() : Status::ok();
}

}  // namespace dsinfer::backends
