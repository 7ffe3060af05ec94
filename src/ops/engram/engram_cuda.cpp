// Argument checks and launches of the CUDA Engram kernels (see engram_cuda.h).
#include "ops/engram/engram_cuda.h"

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

namespace {
Status check_hash(const StepDevice& st, const EngramHashCudaParams& p, const char* op) {
  if (st.T < 0 || st.T > 0x7fffffff) return Status::errorf("{}: bad token count {}", op, st.T);
  if (p.max_ngram < 2 || p.max_ngram > 16 || p.heads < 1 || p.layers < 1)
    return Status::errorf("{}: max_ngram {} outside [2, 16] or no heads / layers", op, p.max_ngram);
  if (p.ngram_rows < p.max_ngram || p.ngram_offset < 0 || !p.slots)
    return Status::errorf("{}: the slot has no n-gram history of {} rows (needs >= {})", op, p.ngram_rows, p.max_ngram);
  if (!p.multipliers || !p.primes || !p.offsets || !p.token_map) return Status::errorf("{}: hash tables missing", op);
  if (st.T * p.layers * p.cols() > 0x7fffffff)
    return Status::errorf("{}: {} tokens x {} layers x {} columns exceed the kernel's 2^31 ids", op, st.T, p.layers, p.cols());
  return Status::ok();
}
}  // namespace

Status engram_hash(const StepDevice& st, const EngramHashCudaParams& p, int64_t* hashes, void* stream) {
  DSI_RETURN_IF_ERROR(check_hash(st, p, "engram_hash"));
  if (st.T == 0) return Status::ok();
  if (!hashes) return Status::error("engram_hash: null output");
  detail::launch_engram_hash(st, p, hashes, stream);
  DSI_CUDA_LAUNCHED("engram hash_kernel");
  return Status::ok();
}

Status engram_history_write(const StepDevice& st, const EngramHashCudaParams& p, void* stream) {
  DSI_RETURN_IF_ERROR(check_hash(st, p, "engram_history_write"));
  if (st.T == 0) return Status::ok();
  detail::launch_engram_history_write(st, p, stream);
  DSI_CUDA_LAUNCHED("engram history_write_kernel");
  return Status::ok();
}

Status engram_gather(const int64_t* hashes, int64_t T, int64_t layers, int64_t layer, int64_t cols,
                     const EngramTableDevice& table, float* out, void* stream) {
  const int64_t hd = table.hd;
  if (T < 0 || T > 0x7fffffff || cols < 1 || cols > 65535 || hd < 1 || layer < 0 || layer >= layers || table.rows < 1)
    return Status::errorf("engram_gather: bad shape T={} cols={} hd={} layer {} of {}", T, cols, hd, layer, layers);
  if (table.scale && hd % 32 != 0) return Status::errorf("engram_gather: an FP8 table needs hd % 32 == 0 (hd {})", hd);
  if (T == 0) return Status::ok();
  if (!hashes || !table.data || !out) return Status::error("engram_gather: null input or output");
  detail::launch_engram_gather(hashes, T, layers, layer, cols, table, out, stream);
  DSI_CUDA_LAUNCHED("engram gather_kernel");
  return Status::ok();
}

Status engram_gate(float* X, int64_t T, int64_t n, int64_t dim, const float* kv, const float* weight, float eps,
                   void* stream) {
  if (T < 0 || n < 1 || dim < 1 || T * n > 0x7fffffff) return Status::errorf("engram_gate: bad shape T={} n={} dim={}", T, n, dim);
  if (T == 0) return Status::ok();
  if (!X || !kv || !weight) return Status::error("engram_gate: null input or output");
  detail::launch_engram_gate(X, T, n, dim, kv, weight, eps, stream);
  DSI_CUDA_LAUNCHED("engram gate_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
