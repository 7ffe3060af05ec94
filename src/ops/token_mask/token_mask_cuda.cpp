// Argument checks and launch of the CUDA token bitmask (see token_mask_cuda.h).
#include "ops/token_mask/token_mask_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/token_mask/token_mask_launch.h"

namespace dsinfer::ops::cuda {

Status apply_token_bitmask(float* logits, int64_t V, int64_t logits_stride, const int32_t* mask,
                           int32_t words_per_row, const int32_t* row_ids, int64_t num_rows, void* stream) {
  if (V <= 0 || V > 0x7fffffff || logits_stride < V || words_per_row <= 0 || num_rows < 0 || num_rows > 65535)
    return Status::errorf("apply_token_bitmask: bad shape V={} stride={} words_per_row={} rows={}", V, logits_stride,
                          words_per_row, num_rows);
  if (num_rows == 0) return Status::ok();
  if (!logits || !mask) return Status::error("apply_token_bitmask: null logits or mask");
  detail::launch_apply_token_bitmask(logits, V, logits_stride, mask, words_per_row, row_ids, num_rows, stream);
  DSI_CUDA_LAUNCHED("apply_token_bitmask_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
