// CUDA-event op timing (see op_timer.h).
#include "backends/cuda/step/op_timer.h"

#include "cuda/cuda_common.h"

namespace dsinfer::backends {

OpTimer::~OpTimer() {
  for (auto& [k, ev] : events_) {
    cudaEventDestroy(static_cast<cudaEvent_t>(ev.first));
    cudaEventDestroy(static_cast<cudaEvent_t>(ev.second));
  }
}

Status OpTimer::mark(const char* name, int64_t layer, bool begin, void* stream) {
  if (!enabled_) return Status::ok();
  const Key op(name, layer);
  int& uses = uses_[op];
  if (begin) {
    if (uses == 0) order_.push_back(op);
    ++uses;
  }
  if (uses == 0) return Status::error("op timer: an op ended that never began");
  const auto key = std::make_pair(op, uses - 1);  // the occurrence begun last
  auto it = events_.find(key);
  if (it == events_.end()) {
    cudaEvent_t a, b;
    DSI_CUDA_TRY(cudaEventCreate(&a));
    DSI_CUDA_TRY(cudaEventCreate(&b));
    it = events_.emplace(key, std::make_pair(static_cast<void*>(a), static_cast<void*>(b))).first;
  }
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(begin ? it->second.first : it->second.second),
                               static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Result<std::vector<runner::RunnerDiagnostics::OpTime>> OpTimer::times(void* stream) const {
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  std::vector<runner::RunnerDiagnostics::OpTime> out;
  for (const Key& op : order_) {
    float total = 0;
    for (int i = 0; i < uses_.at(op); ++i) {
      const auto& ev = events_.at(std::make_pair(op, i));
      float ms = 0;
      DSI_CUDA_TRY(
          cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(ev.first), static_cast<cudaEvent_t>(ev.second)));
      total += ms;
    }
    out.push_back({op.first, op.second, total});
  }
  return out;
}

}  // namespace dsinfer::backends
