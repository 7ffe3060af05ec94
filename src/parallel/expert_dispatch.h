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

// Computes expert `expert`'s output y [dim] for input x [dim] (the owner's weights) of a pair whose routing weight
// is `weight`: what the model combines for that pair (DeepSeek-V4: the output at scale 1, weighted in the combine;
// V4.1's official numerics apply the weight inside the expert, before its bf16 rounding).
using ExpertFn = std::function<void(int32_t expert, float weight, const float* x, float* y)>;

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

// x [T, D]: the tokens' MoE inputs; idx [T, k]: their global expert ids (each in [0, E)); wt [T, k] their routing
// weights. On return y [T * k, D] holds expert idx[t, j]'s output for x[t] at row t * k + j, bit-identical to
// `compute` run on this rank. The payload is exactly what the expert consumes (the local expert id, the pair's
// weight, fp32 x out; fp32 y back: the cpu reference's expert input and output); pairs are packed per destination
// in (token, slot) order. Three collectives: counts, dispatch, combine.
Status dispatch_combine(Communicator& comm, const DispatchShape& shape, std::span<const float> x,
                        std::span<const int32_t> idx, std::span<const float> wt, const ExpertFn& compute,
                        std::vector<float>& y, DispatchStats* stats = nullptr);

// Expert parallelism with every token on every rank (the EP and TP layouts) under --batch-invariant
// (docs/multi_gpu.md "Bit-identical EP and TP"): y [T * k, D] gets, at row t * k + j, the output of expert idx[t, j]
// computed by the rank owning it ([lo, hi): this rank's experts) and zero on every other rank; one all_reduce_sum
// makes it every rank's. Each element is one rank's value plus zeros, which any summation order leaves exact, so the
// combine that follows (every rank, in the one-rank order) gives one rank's bits. It moves k times the bytes of the
// partial-sum all-reduce of [T, D]. x, idx and wt as dispatch_combine's (every rank passes the same step).
Status gather_pair_outputs(Communicator& comm, const DispatchShape& shape, std::span<const float> x,
                           std::span<const int32_t> idx, std::span<const float> wt, const ExpertFn& compute,
                           std::vector<float>& y, DispatchStats* stats = nullptr);

}  // namespace dsinfer::parallel
