// A kernel's opt-in dynamic shared memory, raised safely. cudaFuncAttributeMaxDynamicSharedMemorySize is one value
// per function and device: ranks sharing a GPU launch from their own threads, so a launcher that sets it to each
// call's size lets one thread lower it between another thread's set and launch, and that launch fails
// (cudaErrorInvalidValue; the indexer's top-k did this in session 16). Includable from .cu files (CUDA runtime only).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace dsinfer::cuda {

// Makes the current device's attribute of `func` at least `bytes`, never lowering it, under one lock, so a launch of
// up to `bytes` after this returns cudaSuccess can never meet a smaller value set by another thread.
cudaError_t raise_max_dynamic_smem(const void* func, size_t bytes);

}  // namespace dsinfer::cuda
