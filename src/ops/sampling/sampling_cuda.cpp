// Argument checks and launch of the CUDA sampler (see sampling_cuda.h).
#include "ops/sampling/sampling_cuda.h"

#include <algorithm>

#include "core/env_switch.h"
#include "cuda/cuda_common.h"
#include "ops/sampling/sampling_launch.h"

namespace dsinfer::ops::cuda {

// About two blocks per SM over the rows, at least detail::kGreedySlice logits a block (at most 64 blocks a row);
// 0 (no scan) where the rows exceed the grid's y limit or a row is too short for the partials, and with
// DSINFER_GREEDY_SPLIT=0 (a measurement switch read once: session 33's one block a row; the same tokens).
int32_t greedy_split(int64_t num_rows, int64_t V) {
  static const bool on = env_switch("DSINFER_GREEDY_SPLIT", {"0", "1"}) != "0";
  if (!on || num_rows < 1 || num_rows > 65535 || V < 3) return 0;  // the partials need 3 entries of the work row
  const int64_t want = (2 * int64_t(dsinfer::cuda::current_sm_count()) + num_rows - 1) / num_rows;
  return int32_t(std::clamp<int64_t>(std::min<int64_t>(want, V / detail::kGreedySlice), 1, 64));
}

Status sample_rows(const SampleRowsArgs& a, void* stream) {
  if (a.V <= 0 || a.V > 0x7fffffff || a.logits_stride < a.V || a.num_rows < 0 || a.num_rows > 0x7fffffff ||
      a.logits_rows < 0 || a.logits_rows > 0x7fffffff || a.num_entries < 0 || a.num_entries > 0x7fffffff ||
      a.num_mask_rows < 0 || a.words_per_row < 0)
    return Status::errorf("sample_rows: bad shape V={} stride={} rows={} entries={} mask rows={}", a.V,
                          a.logits_stride, a.num_rows, a.num_entries, a.num_mask_rows);
  if (a.num_mask_rows > 0 && (!a.mask_words || int64_t(a.words_per_row) * 32 < a.V))
    return Status::errorf("sample_rows: {} mask rows need {} words per row (found {})", a.num_mask_rows,
                          (a.V + 31) / 32, a.words_per_row);
  if (a.num_rows == 0) return Status::ok();
  if (!a.logits || !a.rows || !a.work || !a.out || (a.num_entries > 0 && !a.entries))
    return Status::error("sample_rows: null logits, rows, entries, work or output");
  detail::SampleArgs k;
  k.logits = a.logits;
  k.logits_stride = a.logits_stride;
  k.V = int32_t(a.V);
  k.logits_rows = int32_t(a.logits_rows);
  k.rows = a.rows;
  k.num_rows = int32_t(a.num_rows);
  k.entries = a.entries;
  k.num_entries = int32_t(a.num_entries);
  k.mask_words = a.num_mask_rows > 0 ? a.mask_words : nullptr;
  k.num_mask_rows = k.mask_words ? int32_t(std::min<int64_t>(a.num_mask_rows, 0x7fffffff)) : 0;
  k.words_per_row = a.words_per_row;
  k.work = a.work;
  k.out = a.out;
  k.split = greedy_split(a.num_rows, a.V);
  detail::launch_sample_rows(k, stream);
  DSI_CUDA_LAUNCHED("greedy_partials_kernel / sample_rows_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
