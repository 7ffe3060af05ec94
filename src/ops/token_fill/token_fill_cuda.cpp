// Argument checks and launch of the token-fill gather (see token_fill_cuda.h).
#include "ops/token_fill/token_fill_cuda.h"

#include "cuda/cuda_common.h"
#include "ops/token_fill/token_fill_launch.h"

namespace dsinfer::ops::cuda {

Status fill_step_tokens(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const SampleRowOut* sampled,
                        int64_t num_sampled, int64_t vocab, void* stream) {
  if (F <= 0) return Status::ok();
  if (!tokens || !fills || (num_sampled > 0 && !sampled)) return Status::error("fill_step_tokens: null pointer");
  if (T <= 0 || vocab <= 0) return Status::errorf("fill_step_tokens: {} tokens, vocab {}", T, vocab);
  detail::launch_fill_step_tokens(tokens, T, fills, F, sampled, num_sampled, vocab, stream);
  DSI_CUDA_LAUNCHED("fill_step_tokens");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
