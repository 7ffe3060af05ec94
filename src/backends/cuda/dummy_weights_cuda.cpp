// Argument checks and launch of the dummy-weight fill (see dummy_weights_cuda.h).
#include "backends/cuda/dummy_weights_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::backends {

Status fill_dummy_cuda(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream) {
  if (count == 0) return Status::ok();
  if (!dst) return Status::error("fill_dummy_cuda: null destination");
  detail::launch_fill_dummy(dst, count, spec, seed, stream);
  DSI_CUDA_LAUNCHED("fill_dummy_cuda");
  return Status::ok();
}

}  // namespace dsinfer::backends
