// Argument checks and launches of the CUDA compressor (see compressor_cuda.h).
#include "ops/compressor/compressor_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Status compressor_step(const StepDevice& step, const LayerStateView& view, const CompressorCudaParams& p,
                       const float* kv, const float* gate, void* stream) {
  const char* who = p.indexer ? "indexer compressor" : "compressor";
  if (p.m <= 0) return Status::errorf("{}: compress ratio {} must be positive", who, p.m);
  if (p.d <= 0 || p.d > 1024)
    return Status::errorf("{}: d = {} must be in [1, 1024] (one thread per channel)", who, p.d);
  const int64_t want_d = p.indexer ? view.index_head_dim : view.head_dim;
  if (p.d != want_d) return Status::errorf("{}: d = {} but the state layout has {}", who, p.d, want_d);
  const int64_t off = p.indexer ? view.index_frontier_offset : view.frontier_offset;
  const int64_t width = p.indexer ? view.index_frontier_width : view.frontier_width;
  if (off < 0 || (p.indexer ? view.index_keys_offset : view.entries_offset) < 0)
    return Status::errorf("{}: this layer's state has no frontier / entries", who);
  if (width != 2 * p.c() * p.d)
    return Status::errorf("{}: frontier rows are {} floats, expected 2*c*d = {}", who, width, 2 * p.c() * p.d);
  if (view.frontier_rows < p.c() * p.m)
    return Status::errorf("{}: {} frontier rows cannot hold {} window slots", who, view.frontier_rows, p.c() * p.m);
  if (view.entries_per_block <= 0) return Status::errorf("{}: entries_per_block must be positive", who);
  if (!p.ape || !p.norm_w) return Status::errorf("{}: null ape or norm weight", who);
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.d || (p.rope_dim > 0 && !p.inv_freq))
    return Status::errorf("{}: bad rope_dim {} (or no inv_freq)", who, p.rope_dim);
  if (p.sim == CompressorSim::Fp8Nope && (p.fp8_dims < 0 || p.fp8_dims > p.d || p.fp8_block <= 0))
    return Status::errorf("{}: bad fp8 simulation range {} / block {}", who, p.fp8_dims, p.fp8_block);
  if (p.sim == CompressorSim::HadamardFp4 && ((p.d & (p.d - 1)) != 0 || p.fp4_block <= 0))
    return Status::errorf("{}: the Hadamard simulation needs a power-of-two d (got {})", who, p.d);
  if (view.fp8 != (p.out != nullptr) || (p.out && !p.out_rows))
    return Status::errorf("{}: FP8 state needs (and fp32 state refuses) an output buffer with row numbers", who);
  if (step.T < 0 || step.T > 0x7fffffff) return Status::errorf("{}: bad token count {}", who, step.T);
  if (step.T == 0) return Status::ok();
  if (!kv || !gate || !step.pos || !step.seq_of_token || !step.cu_seqlens || !step.start_pos || !step.slot ||
      !step.block_tables)
    return Status::errorf("{}: null projection or step array", who);
  const bool fused = compressor_frontier_in_emit(step.T, step.num_seqs, view.frontier_rows, p);
  detail::launch_compressor_emit(step, view, p, kv, gate, fused, stream);
  DSI_CUDA_LAUNCHED("compressor_emit_kernel");
  if (fused) return Status::ok();
  detail::launch_compressor_frontier(step, view, p, kv, gate, stream);
  DSI_CUDA_LAUNCHED("compressor_frontier_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
