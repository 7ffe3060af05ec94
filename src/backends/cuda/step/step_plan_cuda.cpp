// StepPlanUpload (see step_plan.h): the pinned staging and device copy of the packed step plan.
#include <algorithm>
#include <bit>

#include "backends/cuda/step/step_plan.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

StepPlanUpload::~StepPlanUpload() {
  if (copied_) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(copied_));
    cudaEventDestroy(static_cast<cudaEvent_t>(copied_));
  }
  if (host_) cudaFreeHost(host_);
}

Status StepPlanUpload::upload(const scheduler::BatchPlan& plan, const StepPlanLayout& layout, void* stream, bool* moved) {
  if (moved) *moved = false;
  if (copied_) DSI_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_)));
  else DSI_CUDA_TRY(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(&copied_), cudaEventDisableTiming));
  // A power of two: a step plan a little larger than all before it keeps the captured graphs (decode_graphs.h).
  const size_t want = std::bit_ceil(std::max<size_t>(layout.bytes, 4096));
  if (host_bytes_ < layout.bytes) {
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    host_bytes_ = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_), want));
    host_bytes_ = want;
  }
  pack_step_plan(plan, layout, host_);
  if (dev_.size() < layout.bytes) {
    DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));  // a launched step may still read it
    DSI_RETURN_IF_ERROR(dev_.alloc(want, "step plan"));
    if (moved) *moved = true;
  }
  DSI_CUDA_TRY(cudaMemcpyAsync(dev_.data(), host_, layout.bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(copied_), static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

}  // namespace dsinfer::backends
