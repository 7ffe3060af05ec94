// Expert dispatch / combine of DP attention + EP (docs/multi_gpu.md "DP attention"): each rank holds its own tokens;
// in a MoE layer every routed (token, expert) pair of those tokens goes to the rank owning the expert (all_to_all_v),
// that rank computes the expert's output and sends it back (all_to_all_v), and the token's rank combines the outputs
// itself, in top-k order, exactly as one rank would. Host buffers on the communicator (the cpu backend's ranks);
// every rank calls it once per MoE layer, a rank without tokens with T = 0 (it still serves its peers' pairs).
// Host code, no CUDA.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "parallel/communicator.h"

namespace dsinfer::parallel {

// Computes expert `expert`'s output y [dim] for input x [dim] (the owner's weights; scale 1).
using ExpertFn = std::function<void(int32_t expert, const float* x, float* y)>;

struct DispatchShape {
  int64_t tokens = 0;   // T: this rank's tokens in the step
  int64_t topk = 0;     // k
  int64_t dim = 0;      // D
  int64_t experts = 0;  // E, split evenly: rank r owns [r*E/N, (r+1)*E/N)
};

// Per-rank traffic of one call (bench / docs: bytes per step).
struct DispatchStats {
  int64_t pairs_sent = 0, pairs_served = 0;
  int64_t bytes_sent = 0;  // dispatch + combine payloads sent by this rank (counts excluded)
};

// x [T, D]: the tokens' MoE inputs; idx [T, k]: their global expert ids (each in [0, E)). On return y [T * k, D]
// holds expert idx[t, j]'s output for x[t] at row t * k + j, bit-identical to `compute` run on this rank. The
// payload is exactly what the expert consumes (fp32 x out, fp32 y back: the cpu reference's expert input and
// output); pairs are packed per destination in (token, slot) order. Three collectives: counts, dispatch, combine.
Status dispatch_combine(Communicator& comm, const DispatchShape& shape, std::span<const float> x,
                        std::span<const int32_t> idx, const ExpertFn& compute, std::vector<float>& y,
                        DispatchStats* stats = nullptr);

}  // namespace dsinfer::parallel
