// EP with replicated tokens under --batch-invariant (cuda_forward.h CudaForward::moe_slots; docs/multi_gpu.md
// "Bit-identical EP and TP on the CUDA runner"). The all-reduce of per-rank partial sums (forward_v4_cuda.cpp ffn)
// rounds each rank's partial to fp32 before the ranks are added, which one rank never does; here nothing is summed
// across ranks but zeros:
//   1. the global top-k ids become this rank's local ids, -1 for the other ranks' experts (core_.remap_experts);
//   2. every (token, slot) pair p = t * k + j gets its token's row, and this rank's experts run on the pairs with
//      top-k 1 and weight 1 (moe_cuda: y_p = expert(x_t), exactly; a pair of another rank's expert gives 0);
//   3. the all-reduce sums the [T * k, D] outputs over the ranks: each pair's row is one rank's value plus zeros;
//   4. every rank adds its tokens' pairs in top-k order and the shared expert (computed on every rank) with
//      moe_cuda's own kernels (moe_shared_cuda / moe_combine_cuda), as the DP exchange does.
// k times the all-reduce bytes of the partial-sum path: used only where bits must not move (--batch-invariant).
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "backends/cuda/runner/cuda_forward.h"
#include "cuda/cuda_common.h"
#include "ops/moe/moe_exchange_cuda.h"

namespace dsinfer::backends {

using ops::cuda::WireType;

struct CudaForward::SlotScratch {
  int64_t pairs = 0;                             // pair_token / identity are built for this many pairs
  cuda::DeviceBuffer<int32_t> pair_token, identity;  // p / k, p
  cuda::DeviceBuffer<float> xp, y, ones, shy;
  ops::cuda::MoeWorkspace ws;
};

Status CudaForward::moe_slots(int64_t l, const float* x, int64_t T, int32_t* ridx, const float* rw, float* out) {
  if (!comm_) return Status::error("cuda runner: expert parallelism without a communicator");
  if (!slot_) slot_ = std::make_shared<SlotScratch>();
  SlotScratch& S = *slot_;
  const MoeLayerView L = moe_layer(l);
  const ops::cuda::MoeExpertsDevice& ex = *L.experts;
  const ops::KernelMode mode = kernel_mode();
  const int64_t D = cfg_.hidden_size, k = cfg_.num_experts_per_tok, E = cfg_.n_routed_experts, P = T * k;
  auto* cs = static_cast<cudaStream_t>(stream_);
  if (T == 0) return Status::ok();

  // Pair -> token and pair -> pair maps, built once per size (they depend on T * k only).
  if (S.pairs < P) {
    const int64_t n = std::max<int64_t>(P, 2 * S.pairs);
    std::vector<int32_t> host(size_t(2 * n));
    for (int64_t p = 0; p < n; ++p) {
      host[size_t(p)] = int32_t(p / k);
      host[size_t(n + p)] = int32_t(p);
    }
    DSI_RETURN_IF_ERROR(sync());  // the previous step may still read the old maps
    DSI_RETURN_IF_ERROR(S.pair_token.alloc(size_t(n), "EP pair tokens"));
    DSI_RETURN_IF_ERROR(S.identity.alloc(size_t(n), "EP pair slots"));
    DSI_CUDA_TRY(cudaMemcpyAsync(S.pair_token.data(), host.data(), size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, cs));
    DSI_CUDA_TRY(cudaMemcpyAsync(S.identity.data(), host.data() + n, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, cs));
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    S.pairs = n;
  }

  // 1-2. This rank's experts on their pairs.
  DSI_RETURN_IF_ERROR(mark("moe_remap", l, true));
  DSI_RETURN_IF_ERROR(core_.remap_experts(ridx, l, T, k));
  DSI_RETURN_IF_ERROR(mark("moe_remap", l, false));
  DSI_RETURN_IF_ERROR(mark("moe", l, true));
  const int64_t shared_inter = L.shared ? L.shared->w1.rows : 0;
  const int64_t pair_chunk = std::max<int64_t>(ops::cuda::moe_chunk_tokens(mode, P, ex.experts, 1), 1);
  const int64_t own_chunk = std::max<int64_t>(ops::cuda::moe_chunk_tokens(mode, T, E, k), 1);
  DSI_RETURN_IF_ERROR(S.ws.reserve(std::max(pair_chunk, own_chunk), k, D, std::max(ex.inter, shared_inter), ex.experts));
  DSI_RETURN_IF_ERROR(grow(S.xp, size_t(P * D), "EP pair inputs"));
  DSI_RETURN_IF_ERROR(grow(S.y, size_t(P * D), "EP pair outputs"));
  DSI_RETURN_IF_ERROR(grow(S.ones, size_t(P), "EP pair weights"));
  DSI_RETURN_IF_ERROR(ops::cuda::pack_rows_cuda(x, D, S.pair_token.data(), P, WireType::kF32, S.xp.data(), stream_));
  DSI_RETURN_IF_ERROR(ops::cuda::fill_cuda(S.ones.data(), P, 1.0f, stream_));
  const ops::cuda::MoePath pair_path = ops::cuda::moe_path(mode, P);
  for (int64_t c = 0; c < P; c += pair_chunk) {
    const int64_t m = std::min(pair_chunk, P - c);
    DSI_RETURN_IF_ERROR(ops::cuda::moe_cuda(S.xp.data() + c * D, m, ridx + c, S.ones.data() + c, 1, ex, nullptr,
                                            L.limit, 0.0f, S.y.data() + c * D, S.ws, stream_, pair_path));
  }
  DSI_RETURN_IF_ERROR(mark("moe", l, false));

  // 3. Every pair's output on every rank.
  DSI_RETURN_IF_ERROR(mark("moe_allreduce", l, true));
  DSI_RETURN_IF_ERROR(comm_->all_reduce_sum(S.y.data(), size_t(P * D), stream_));
  DSI_RETURN_IF_ERROR(mark("moe_allreduce", l, false));
  core_.traffic_.bytes += P * D * int64_t(sizeof(float));
  ++core_.traffic_.calls;

  // 4. The shared expert and the top-k sum, chunked as one rank chunks its MoE.
  DSI_RETURN_IF_ERROR(mark("moe_shared", l, true));
  DSI_RETURN_IF_ERROR(moe_shared_and_combine(l, x, T, own_chunk, S.y.data(), S.identity.data(), rw, S.shy, S.ws, out));
  return mark("moe_shared", l, false);
}

}  // namespace dsinfer::backends
