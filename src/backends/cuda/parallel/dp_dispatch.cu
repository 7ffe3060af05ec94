// The fixed-capacity dispatch plan on the device (see dp_dispatch_cuda.h). One block of 256 threads walks the pairs
// in chunks of 256; for each destination rank a warp ballot and the warps' counts in shared memory give each pair its
// index among the chunk's pairs for that rank, after the earlier chunks' (a stable, order-keeping compaction). One
// block: a decode step has T x k of a few hundred pairs; a prefill step of 8,192 tokens 49,152, 192 chunks.
#include <cuda_runtime.h>

#include "backends/cuda/parallel/dp_dispatch_cuda.h"

namespace dsinfer::backends::detail {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
dp_dispatch_plan_kernel(const int32_t* ridx, int64_t pairs, int32_t k, int32_t E, int32_t N, int64_t cap,
                        int32_t* send_token, int32_t* send_expert, int32_t* pos_of) {
  __shared__ int32_t base[kDpDispatchMaxRanks];
  __shared__ int32_t warp_off[kWarps];
  __shared__ int32_t total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t per_rank = E / N;
  for (int64_t i = threadIdx.x; i < int64_t(N) * cap; i += kThreads) {
    send_token[i] = 0;
    send_expert[i] = -1;
  }
  if (threadIdx.x < N) base[threadIdx.x] = 0;
  __syncthreads();  // the padding is written before any pair lands on it
  for (int64_t c = 0; c < pairs; c += kThreads) {
    const int64_t p = c + threadIdx.x;
    const int32_t e = p < pairs ? ridx[p] : -1;
    const int32_t q = e >= 0 && e < E ? e / per_rank : -1;
    if (p < pairs && q < 0) pos_of[p] = -1;
    for (int32_t r = 0; r < N; ++r) {
      const unsigned mask = __ballot_sync(0xffffffffu, q == r);
      if (lane == 0) warp_off[warp] = __popc(mask);
      __syncthreads();
      if (threadIdx.x == 0) {
        int32_t run = 0;
        for (int w = 0; w < kWarps; ++w) {
          const int32_t n = warp_off[w];
          warp_off[w] = run;
          run += n;
        }
        total = run;
      }
      __syncthreads();
      if (q == r) {
        const int64_t j = int64_t(r) * cap + base[r] + warp_off[warp] + __popc(mask & ((1u << lane) - 1u));
        send_token[j] = int32_t(p / k);
        send_expert[j] = e - r * per_rank;
        pos_of[p] = int32_t(j);
      }
      __syncthreads();
      if (threadIdx.x == 0) base[r] += total;
      __syncthreads();
    }
  }
}

}  // namespace

void launch_dp_dispatch_plan(const int32_t* ridx, int64_t T, int32_t k, int32_t E, int32_t N, int64_t cap,
                             int32_t* send_token, int32_t* send_expert, int32_t* pos_of, void* stream) {
  if (N < 1 || N > kDpDispatchMaxRanks || int64_t(N) * cap == 0) return;
  dp_dispatch_plan_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      ridx, T * k, k, E, N, cap, send_token, send_expert, pos_of);
}

void dp_dispatch_plan_ref(const std::vector<int32_t>& ridx, int32_t k, int32_t E, int32_t N, int64_t cap,
                          std::vector<int32_t>& send_token, std::vector<int32_t>& send_expert,
                          std::vector<int32_t>& pos_of) {
  send_token.assign(size_t(N * cap), 0);
  send_expert.assign(size_t(N * cap), -1);
  pos_of.assign(ridx.size(), -1);
  std::vector<int64_t> used(size_t(N), 0);
  const int32_t per_rank = E / N;
  for (size_t p = 0; p < ridx.size(); ++p) {
    const int32_t e = ridx[p];
    if (e < 0 || e >= E) continue;
    const int32_t q = e / per_rank;
    const int64_t j = q * cap + used[size_t(q)]++;
    send_token[size_t(j)] = int32_t(int64_t(p) / k);
    send_expert[size_t(j)] = e - q * per_rank;
    pos_of[p] = int32_t(j);
  }
}

}  // namespace dsinfer::backends::detail
