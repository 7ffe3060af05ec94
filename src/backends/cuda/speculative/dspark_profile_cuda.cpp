// DsparkCuda::profile_block (see draft_cuda.h): with DSINFER_DSPARK_PROFILE=1 the propose block's graph listed once
// per padded batch (its kernels by name in launch order, the node count), replayed and timed, and each stage run
// eagerly behind a delay and timed between events, to stderr. A measuring tool beside the drafter's own code.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/speculative/draft_cuda.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

// The profile (DSINFER_DSPARK_PROFILE=1). Every replay writes what the round's own launch writes next (the same ring
// rows from the same capture, the block's scratch and outputs), so it leaves no trace.
Status DsparkCuda::profile_block(const BlockLayout& bl, int32_t kpick) {
  cudaStream_t cs = static_cast<cudaStream_t>(ctx_.stream);
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  cudaGraph_t g = nullptr;
  DSI_CUDA_TRY(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed));
  const Status fwd = block_forward(bl, kpick);
  const cudaError_t end = cudaStreamEndCapture(cs, &g);
  DSI_RETURN_IF_ERROR(fwd);
  DSI_CUDA_TRY(end);
  size_t count = 0;
  DSI_CUDA_TRY(cudaGraphGetNodes(g, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  DSI_CUDA_TRY(cudaGraphGetNodes(g, nodes.data(), &count));
  std::string list;
  std::string last;
  int run = 0, kernels = 0;
  auto flush_run = [&] {
    if (run) list += "    " + std::to_string(run) + " x " + last + "\n";
  };
  for (cudaGraphNode_t nd : nodes) {
    cudaGraphNodeType ty;
    DSI_CUDA_TRY(cudaGraphNodeGetType(nd, &ty));
    std::string name = "node type " + std::to_string(int(ty));
    if (ty == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams kp{};
      const char* fn = nullptr;
      if (cudaGraphKernelNodeGetParams(nd, &kp) != cudaSuccess || cudaFuncGetName(&fn, kp.func) != cudaSuccess) {
        (void)cudaGetLastError();
        fn = nullptr;
      }
      name = fn ? fn : "? (no name)";
      name = name.substr(0, 110) + " <<<" + std::to_string(kp.gridDim.x * kp.gridDim.y * kp.gridDim.z) + " x " +
             std::to_string(kp.blockDim.x * kp.blockDim.y * kp.blockDim.z) + ">>>";
      ++kernels;
    }
    if (name == last) {
      ++run;
    } else {
      flush_run();
      last = name;
      run = 1;
    }
  }
  flush_run();
  cudaGraphExec_t ex = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&ex, g, 0);
  cudaGraphDestroy(g);
  DSI_CUDA_TRY(inst);
  cudaEvent_t e0, e1;
  DSI_CUDA_TRY(cudaEventCreate(&e0));
  DSI_CUDA_TRY(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) DSI_CUDA_TRY(cudaGraphLaunch(ex, cs));
  constexpr int kReplays = 200;
  DSI_CUDA_TRY(cudaEventRecord(e0, cs));
  for (int i = 0; i < kReplays; ++i) DSI_CUDA_TRY(cudaGraphLaunch(ex, cs));
  DSI_CUDA_TRY(cudaEventRecord(e1, cs));
  DSI_CUDA_TRY(cudaEventSynchronize(e1));
  float graph_ms = 0;
  DSI_CUDA_TRY(cudaEventElapsedTime(&graph_ms, e0, e1));
  cudaGraphExecDestroy(ex);
  // Stages: eager, behind a ~1 ms memset so the host's launches queue up and the device runs them back to back.
  void* delay = nullptr;
  constexpr size_t kDelayBytes = size_t(4) << 30;
  DSI_CUDA_TRY(cudaMalloc(&delay, kDelayBytes));
  std::vector<std::string> names;
  std::vector<std::vector<float>> ms;  // [repeat][stage]
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<cudaEvent_t> ev;
    names.clear();
    DSI_CUDA_TRY(cudaMemsetAsync(delay, rep, kDelayBytes, cs));
    ev.emplace_back();
    DSI_CUDA_TRY(cudaEventCreate(&ev.back()));
    DSI_CUDA_TRY(cudaEventRecord(ev.back(), cs));
    fwd_.mark = [&](const char* what) {
      ev.emplace_back();
      cudaEventCreate(&ev.back());
      cudaEventRecord(ev.back(), cs);
      names.emplace_back(what);
    };
    const Status st = block_forward(bl, kpick);
    fwd_.mark = nullptr;
    DSI_RETURN_IF_ERROR(st);
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    std::vector<float> r;
    for (size_t i = 1; i < ev.size(); ++i) {
      float t = 0;
      cudaEventElapsedTime(&t, ev[i - 1], ev[i]);
      r.push_back(t);
    }
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    ms.push_back(std::move(r));
  }
  cudaFree(delay);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::string stages;
  float total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    float best = 1e30f;
    for (const auto& r : ms) best = std::min(best, r[i]);
    total += best;
    stages += "    " + std::to_string(best * 1000.0f).substr(0, 6) + " us  " + names[i] + "\n";
  }
  std::fprintf(stderr,
               "dspark profile: block of %lld padded sequences x %lld positions, %s ingest of %lld rows, %d picks: "
               "graph of %zu nodes (%d kernels), replay %.4f ms (mean of %d)\n%s"
               "  eager stages (min of 5, sum %.4f ms):\n%s",
               static_cast<long long>(bl.Bp), static_cast<long long>(bl.g), bl.ing_n > 0 ? "with the" : "without an",
               static_cast<long long>(bl.ing_n), kpick, count, kernels, graph_ms / kReplays, kReplays, list.c_str(),
               total, stages.c_str());
  return Status::ok();
}

}  // namespace dsinfer::backends
