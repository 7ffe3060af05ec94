#include "cuda/func_smem.h"

#include <map>
#include <mutex>
#include <utility>

namespace dsinfer::cuda {

cudaError_t raise_max_dynamic_smem(const void* func, size_t bytes) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> raised;  // the value set, per (function, device)
  const std::lock_guard<std::mutex> lock(mu);
  size_t& now = raised[{func, device}];
  if (bytes <= now) return cudaSuccess;
  const cudaError_t s = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (s == cudaSuccess) now = bytes;
  return s;
}

}  // namespace dsinfer::cuda
