// The dummy-weight fill's validation and launch (see dummy_fill_cuda.h).
#include "ops/dummy_fill/dummy_fill_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Status fill_dummy_cuda(void* dst, size_t count, const DummySpec& spec, uint64_t seed, void* stream) {
  if (count == 0) return Status::ok();
  if (!dst) return Status::error("fill_dummy_cuda: null destination");
  detail::launch_fill_dummy(dst, count, spec, seed, stream);
  DSI_CUDA_LAUNCHED("fill_dummy_cuda");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
