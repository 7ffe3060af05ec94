// Capture and replay of decode-step CUDA graphs (see decode_graphs.h).
#include "backends/cuda/step/decode_graphs.h"

#include "cuda/cuda_common.h"

namespace dsinfer::backends {

void DecodeGraphs::clear() {
  for (auto& [t, g] : graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  graphs_.clear();
}

Status DecodeGraphs::launch(int64_t batch, uint64_t scratch_gen, void* stream, const std::function<Status()>& forward) {
  cudaStream_t cs = static_cast<cudaStream_t>(stream);
  if (gen_ != scratch_gen) {
    clear();
    gen_ = scratch_gen;
  }
  auto it = graphs_.find(batch);
  if (it == graphs_.end()) {
    DSI_CUDA_TRY(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
    const Status fwd = forward();
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(cs, &g);
    if (!fwd) {
      if (g) cudaGraphDestroy(g);
      return fwd.with_context("capturing the decode graph");
    }
    DSI_CUDA_TRY(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    DSI_CUDA_TRY(inst);
    it = graphs_.emplace(batch, static_cast<void*>(exec)).first;
    ++captures_;
  }
  DSI_CUDA_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), cs));
  return Status::ok();
}

}  // namespace dsinfer::backends
