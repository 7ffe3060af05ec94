// EPLB on a CudaRunner shard (docs/multi_gpu.md "EPLB"; the ParallelRunner decides, parallel_runner_cuda.cpp):
// the placement tables and load counters on the device, the remap of each MoE layer, and the rebalance between
// steps (read the counters, apply a new placement: changed slots reloaded, tables re-uploaded, graphs dropped).
#include <cuda_runtime.h>

#include "backends/cuda/runner/cuda_runner_impl.h"
#include "cuda/cuda_common.h"
#include "ops/moe/expert_remap_cuda.h"

namespace dsinfer::backends {

Result<ExpertSlots> CudaRunner::eplb_init(const runner::RunnerOptions& opts) {
  const int64_t L = cfg_.num_hidden_layers, E = cfg_.n_routed_experts;
  if (!opts.eplb) {
    if (opts.num_redundant_experts != 0)
      return Status::errorf("--num-redundant-experts {} needs --eplb (redundant expert slots are EPLB's)",
                            opts.num_redundant_experts);
    return range_slots(L, experts_);
  }
  DSI_RETURN_IF_ERROR(parallel::validate_eplb(E, ep_size_, opts.num_redundant_experts, opts.eplb_interval));
  eplb_.on = true;
  eplb_.redundant = opts.num_redundant_experts;
  // Every rank starts from the same static placement (the ParallelRunner's placement_ starts there too).
  const parallel::Placement p = parallel::static_placement(int32_t(E), ep_size_, eplb_.redundant);
  eplb_.slots = p.slots_per_rank;
  eplb_.table_len = p.table_len();
  DSI_RETURN_IF_ERROR(eplb_upload_tables(std::vector<parallel::Placement>(size_t(L), p)));
  if (ep_rank_ == 0) {  // every rank sees the same routing: one counts it
    DSI_RETURN_IF_ERROR(eplb_.counts.alloc(size_t(L * E), "eplb expert counts"));
    DSI_CUDA_TRY(cudaMemset(eplb_.counts.data(), 0, eplb_.counts.bytes()));
  }
  return ExpertSlots(size_t(L), p.rank_slots(ep_rank_));
}

Status CudaRunner::eplb_upload_tables(const std::vector<parallel::Placement>& layers) {
  std::vector<int32_t> host;
  host.reserve(layers.size() * size_t(eplb_.table_len));
  for (const parallel::Placement& p : layers) {
    if (p.table_len() != eplb_.table_len || p.slots_per_rank != eplb_.slots)
      return Status::errorf("eplb: placement of {} slots per rank does not match this runner's {}", p.slots_per_rank,
                            eplb_.slots);
    const std::vector<int32_t> t = p.table();
    host.insert(host.end(), t.begin(), t.end());
  }
  // Synchronous copy into the same buffer (same size): callers make sure no step is in flight.
  return eplb_.tables.upload(host.data(), host.size(), "eplb placement tables");
}

Status RunnerCore::remap_experts(int32_t* ridx, int64_t l, int64_t T, int64_t k) {
  if (!eplb_.on) return ops::cuda::remap_experts_cuda(ridx, T * k, experts_.lo, experts_.hi, stream_);
  const int64_t E = cfg_.n_routed_experts;
  uint32_t* counts = eplb_.counts.size() ? eplb_.counts.data() + l * E : nullptr;
  return ops::cuda::remap_experts_eplb_cuda(ridx, T * k, int32_t(k), eplb_.tables.data() + l * eplb_.table_len,
                                            int32_t(E), ep_rank_, eplb_.slots, counts, stream_);
}

Status CudaRunner::eplb_take_counts(std::vector<uint32_t>& counts) {
  counts.clear();
  if (!eplb_.on || !eplb_.counts.size()) return Status::ok();
  DSI_RETURN_IF_ERROR(bind_device());
  auto* s = static_cast<cudaStream_t>(stream_);
  DSI_CUDA_TRY(cudaStreamSynchronize(s));  // the last step's increments are in
  counts.resize(eplb_.counts.size());
  DSI_RETURN_IF_ERROR(eplb_.counts.download(counts.data(), counts.size()));
  DSI_CUDA_TRY(cudaMemsetAsync(eplb_.counts.data(), 0, eplb_.counts.bytes(), s));
  DSI_CUDA_TRY(cudaStreamSynchronize(s));
  return Status::ok();
}

Result<int32_t> CudaRunner::eplb_apply(const std::vector<parallel::Placement>& layers) {
  if (!eplb_.on) return Status::error("eplb: this runner was created without --eplb");
  if (int64_t(layers.size()) != cfg_.num_hidden_layers)
    return Status::errorf("eplb: {} layer placements for {} layers", layers.size(), cfg_.num_hidden_layers);
  DSI_RETURN_IF_ERROR(bind_device());
  auto* s = static_cast<cudaStream_t>(stream_);
  DSI_CUDA_TRY(cudaStreamSynchronize(s));  // no step reads the slots or tables being replaced
  int32_t reloaded = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].slots_per_rank != eplb_.slots) return Status::error("eplb: placement shape changed");
    DSI_ASSIGN_OR_RETURN(const int32_t n, fwd_->reload_expert_slots(int64_t(l), layers[l].rank_slots(ep_rank_)));
    reloaded += n;
  }
  DSI_RETURN_IF_ERROR(eplb_upload_tables(layers));
  graphs_.clear();  // captured steps hold the old pointers (a group's graphs: ParallelRunner::rebalance)
  DSI_CUDA_TRY(cudaStreamSynchronize(s));  // dummy regeneration ran on the stream
  return reloaded;
}

}  // namespace dsinfer::backends
