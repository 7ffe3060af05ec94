// The device ceilings that the roofline floors divide by (perf/cost_model.h Ceilings), measured in the calling
// process on the GPU in hand: device-to-device copy bandwidth and dense BF16 / FP8 GEMM rates at 8192^3.
#pragma once
#include "core/status.h"
#include "perf/cost_model.h"

namespace dsinfer::perf {

// Measures on the current CUDA device (ceilings_cuda.cpp, CUDA builds only): a 1 GiB device-to-device copy (bytes
// read + written), and cuBLASLt GEMMs of 8192 x 8192 x 8192 on random data, BF16 and FP8 e4m3 with per-tensor scales
// (bf16 out, fp32 accumulation); medians of 10 timed runs after 3 warm-ups (CUDA events). An error names the step
// that failed (allocation, no cuBLASLt algorithm, ...). About 2 GiB of device memory, freed before it returns.
Result<Ceilings> measure_ceilings();

// "measured" (measure_ceilings) or "nominal" (the datasheet defaults of Ceilings); an error names an unknown value.
Status validate_ceilings_mode(const std::string& mode);

}  // namespace dsinfer::perf
