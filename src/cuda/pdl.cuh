// Device side and launcher of programmatic dependent launch (cuda/pdl.h says what it is and the rule a kernel
// started by pdl_launch follows). Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "cuda/pdl.h"

namespace dsinfer::cuda {

// Waits until the grid this one follows has completed and its memory is visible (a no-op when the kernel was not
// launched with the attribute), then lets the next PDL kernel of the stream be scheduled: its blocks take free
// slots and wait in their own pdl_wait, so it is safe for any kernel that calls this first.
__device__ __forceinline__ void pdl_wait_then_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization where pdl_enabled(). The
// kernel must call pdl_wait_then_release() before it touches any memory that a kernel may write: in practice as its
// first statement. Only loads may be issued before it, and only of memory the kernel launched just before it cannot be
// writing (every kernel before that one has completed: it passed its own wait before this one could start): model
// weights, as the GEMV and streaming GEMMs do with their first K step, and the step's tables (positions, sequence
// tables, slots: uploaded, or written by a kernel ahead of the forward, never by the forward's own kernels), as
// kv_encode_ring, fp8_state_keys and head_norm_rope (HeadNormRopeParams::pos_ready) do since session 36. Every store
// stays after the wait.
template <typename... P, typename... A>
cudaError_t pdl_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

}  // namespace dsinfer::cuda
