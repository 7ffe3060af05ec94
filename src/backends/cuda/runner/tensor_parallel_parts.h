// A TP rank's share of the attention projections as the GEMM calls that keep the whole weight's kernels (docs/
// multi_gpu.md "TP attention on the CUDA runner"). The GEMM plans (ops/gemm/gemm_plan.h) choose a kernel and its K
// split from the call's shape: under --batch-invariant a single weight up to 4096 outputs takes the streaming or the
// skinny kernel and a grouped call always the tiled one, and the fast path's GEMV preference differs for grouped
// and single weights. So a rank's part of a weight, called naively, can run another kernel than one rank runs on the
// whole weight (measured, bench/NOTES.md session 14: a rank holding one wo_a output group ran the skinny / streaming
// kernel where the whole weight's call runs the tiled one). These functions decide how a rank calls its part so
// that its rows take the whole weight's kernel; the runner (attention_v4_cuda.cpp) only executes the result.
// Implemented with the rest of TP in backends/cuda/parallel/tensor_parallel_cuda.cpp.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "ops/gemm/gemm_launch.h"  // DeviceWeight

namespace dsinfer::backends::tp {

// Rows [r0, r1) of w as a weight of its own (an FP8 block weight: starting a scale block, or inside one); an error
// otherwise.
Result<ops::cuda::DeviceWeight> weight_rows(const ops::cuda::DeviceWeight& w, int64_t r0, int64_t r1);

// One projection call over a part of a weight: `groups` == 1 a plain GEMM of w, else a grouped GEMM of `groups`
// groups of w.rows / groups rows, group g reading x + g * x_stride and writing y + g * y_stride.
struct PartGemm {
  ops::cuda::DeviceWeight w;
  int64_t groups = 1, x_stride = 0, y_stride = 0;
};

// wq_b: rows [r0, r1) of the single weight w (every row reads the same x). Outside --batch-invariant (invariant
// false) the plain view. Under it: the plain view where its batch-invariant plan (gemm_invariant_plan, sm_count SMs)
// equals the whole weight's; where the whole weight runs the tiled kernel and the view would not (V4-Flash wq_b at 8
// ranks: 4096 rows take the streaming kernel), the view as two halves of a grouped call with x_stride 0, which the
// plan always gives the tiled kernel. An error where neither holds (the rows could not keep the whole weight's bits).
Result<PartGemm> rows_part(const ops::cuda::DeviceWeight& w, int64_t r0, int64_t r1, bool invariant, int sm_count);

// wo_a: groups [g0, g1) of the grouped weight w of `groups` groups, group g reading x + g * x_stride (its input
// width). Two or more groups: one grouped call over them. One group of a grouped weight (groups > 1): its rows as
// two halves of a grouped call with x_stride 0 (both halves read the group's input), so the plans see a grouped
// weight as they do for the whole call, in every mode (a group of odd rows cannot be halved: its plain call).
Result<PartGemm> groups_part(const ops::cuda::DeviceWeight& w, int64_t groups, int64_t g0, int64_t g1,
                             int64_t x_stride);

}  // namespace dsinfer::backends::tp
