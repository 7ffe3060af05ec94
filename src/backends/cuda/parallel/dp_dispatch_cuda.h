// DP attention's expert dispatch planned on the device, at a fixed capacity (docs/multi_gpu.md "DP attention + EP on
// the CUDA runner", the fixed-capacity exchange): the pairs of this rank's routing packed per destination rank, in
// (token, top-k slot) order as parallel::plan_dispatch packs them, but each destination's segment `cap` pairs long
// (the worst case: every pair to one rank), so no count has to reach the host. Host reference:
// dp_dispatch_plan_ref; the kernel matches it exactly (GpuDpDispatch.*). Plain header (no CUDA types, no Status: the
// caller checks the launch).
#pragma once
#include <cstdint>
#include <vector>

namespace dsinfer::backends::detail {

inline constexpr int32_t kDpDispatchMaxRanks = 16;
// The fixed-capacity exchange's largest step: N ranks x the step's largest per-rank token count, in tokens. Its
// buffers hold N segments of the worst case (every pair to one rank), so they grow as N^2 x T x k rows: ~8 GB a rank
// at 8,192-token prefill chunks on 2 ranks (session 19). Steps above this take the exchange of counts (one host
// synchronisation a layer, negligible beside a prefill chunk's work); decode steps up to 256 sequences a rank at 4
// ranks stay fixed, and so graphable.
inline constexpr int64_t kDpFixedExchangeMaxRows = 1024;

// ridx [T * k] global expert ids (E experts, E / N on each rank). Writes send_token [N * cap] and send_expert
// [N * cap] (segment q: the pairs for rank q, then padding: token 0, expert -1, which the MoE kernels skip) and
// pos_of [T * k] (pair i's row in the segments: q * cap + its index; -1 for an id outside [0, E)). cap >= T * k.
void launch_dp_dispatch_plan(const int32_t* ridx, int64_t T, int32_t k, int32_t E, int32_t N, int64_t cap,
                             int32_t* send_token, int32_t* send_expert, int32_t* pos_of, void* stream);

// The host reference of the same layout.
void dp_dispatch_plan_ref(const std::vector<int32_t>& ridx, int32_t k, int32_t E, int32_t N, int64_t cap,
                          std::vector<int32_t>& send_token, std::vector<int32_t>& send_expert,
                          std::vector<int32_t>& pos_of);

}  // namespace dsinfer::backends::detail
