// Argument checks and launch of the token-fill gather and the chained step's fill (see token_fill_cuda.h).
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

Status fill_chained_step(int32_t* tokens, int64_t* pos, int64_t* start_pos, int64_t S, int64_t n,
                         const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int64_t block,
                         void* stream) {
  if (S <= 0) return Status::ok();
  if (!tokens || !pos || !start_pos || !accepted || !verified || !drafts)
    return Status::error("fill_chained_step: null pointer");
  if (block < 1 || n < 1 || n > block + 1 || S * n > 1024)
    return Status::errorf("fill_chained_step: {} sequences of {} tokens after a block of {}", S, n, block);
  detail::launch_fill_chained_step(tokens, pos, start_pos, int32_t(S), int32_t(n), accepted, verified, drafts,
                                   int32_t(block), stream);
  DSI_CUDA_LAUNCHED("fill_chained_step");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
